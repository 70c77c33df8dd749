"""A view of the lab as a report a reviewer or a teacher can hand on: one self-contained HTML file
(:mod:`lab.report.html`); ``python -m lab.report --link '<the page link>' --out report.html`` makes the same
report without a browser.

``About`` and ``render`` are read from :mod:`lab.report.html` on first use: the command line's check of a link
(:mod:`lab.report.link`) answers without loading the figure builders and plotly."""

from __future__ import annotations

__all__ = ["About", "render"]


def __getattr__(name: str):
    if name in __all__:
        from lab.report import html

        return getattr(html, name)
    raise AttributeError(f"module 'lab.report' has no attribute {name!r}")
