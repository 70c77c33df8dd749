"""A view of the lab as a report a reviewer or a teacher can hand on: one self-contained HTML file
(:mod:`lab.report.html`); ``python -m lab.report --link '<the page link>' --out report.html`` makes the same
report without a browser."""

from lab.report.html import About, render

__all__ = ["About", "render"]
