"""The report of a page link without a browser: the page runs headless in Streamlit's AppTest with the link's
scenario and view, exactly as a browser session would run it, and the sections it showed become the same HTML
report the page's button makes. ``python -m lab.report`` starts this module."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]


class LinkError(ValueError):
    pass


def page_of(link: str) -> tuple[str, str, str, dict[str, str]]:
    """(page file, page stem, title, query parameters) of a page link of this lab."""
    sys.path.insert(0, str(ROOT))
    from app import PAGES

    try:
        parts = urlsplit(link.strip())
    except ValueError as exc:
        raise LinkError(f"this is not a link: {exc}") from None
    stem = parts.path.strip("/").rsplit("/", 1)[-1] or "home"
    found = [(f, t) for f, t, _ in PAGES if Path(f).stem == stem]
    if not found:
        raise LinkError(f"the link names no page of the lab ({stem!r}); a page link looks like "
                        "http://localhost:8501/placement?...")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    return found[0][0], stem, found[0][1], query


def report(link: str, timeout: float = 300.0) -> str:
    """The HTML report of ``link``'s view."""
    os.environ["LAB_WARM"] = "0"  # a headless page starts no warm starter for jobs it will not run
    from streamlit.testing.v1 import AppTest

    from lab.report import render
    from lab.report.about import about
    from lab.view.state import VIEW
    from ui.report import SHOWN
    from ui.session import SCENARIO_KEY

    file, stem, title, query = page_of(link)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    if stem != "home":
        at.switch_page(file)
        at.run()
    if at.exception:
        raise LinkError(f"the page failed: {at.exception[0].value}")
    state = at.session_state
    sections = list(state[SHOWN].values()) if SHOWN in state else []
    values = {k: state[k] for k in VIEW if k in state}
    return render(about(title, stem, link, values, state[SCENARIO_KEY]), sections)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.report", description=__doc__)
    ap.add_argument("--link", required=True, help="a page link of the lab (its address with the view)")
    ap.add_argument("--out", required=True, help="the HTML file to write")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds the page may take (default 300)")
    args = ap.parse_args(argv)
    from lab.errors import LabError

    try:
        html = report(args.link, args.timeout)
    except (LinkError, LabError) as exc:
        print(f"no report: {exc}", file=sys.stderr)
        return 2
    Path(args.out).write_text(html, encoding="utf-8")
    print(f"report of {args.link[:80]}{'…' if len(args.link) > 80 else ''}: {args.out} ({len(html) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
