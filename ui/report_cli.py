"""The report of a page link without a browser: the page runs headless in Streamlit's AppTest with the link's
scenario and view, exactly as a browser session would run it, and the sections it showed become the same HTML
report the page's button makes. ``python -m lab.report`` starts this module.

Whatever it refuses (a link that is not an http or https page address of the lab, an ``--out`` in a folder that
does not exist or cannot be written) it says in one line on stderr with exit code 2, before the page runs, and
writes no file; a page that fails is one line too, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from lab.scenario.text import shown

ROOT = Path(__file__).resolve().parents[1]


class LinkError(ValueError):
    pass


def page_of(link: str) -> tuple[str, str, str, dict[str, str]]:
    """(page file, page stem, title, query parameters) of a page link of this lab."""
    sys.path.insert(0, str(ROOT))
    from lab.view.pages import PAGES
    from lab.errors import LabError
    from lab.report.link import check_link

    try:
        parts = urlsplit(check_link(link))
    except LabError as exc:
        raise LinkError(str(exc)) from None
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


def refuse(message: str, code: int) -> int:
    """``message`` as the one line a refusal prints (its line breaks as spaces), and ``code``."""
    print(f"no report: {' '.join(message.split())}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.report", description=__doc__)
    ap.add_argument("--link", required=True, help="a page link of the lab (its address with the view)")
    ap.add_argument("--out", required=True, help="the HTML file to write")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds the page may take (default 300)")
    args = ap.parse_args(argv)
    from lab.errors import LabError
    from lab.report.link import check_out

    out = Path(args.out)
    try:
        page_of(args.link)  # refused before the page runs: a link of no page, an --out that cannot be written
        check_out(out)
        html = report(args.link, args.timeout)
    except (LinkError, LabError) as exc:
        return refuse(str(exc), 2)
    except Exception as exc:  # noqa: BLE001 - a command line says what failed in one line, never a traceback
        return refuse(f"the page failed: {type(exc).__name__}: {exc}", 1)
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as exc:
        return refuse(f"cannot write {shown(str(out), 80)}: {exc.strerror or exc}", 2)
    print(f"report of {args.link[:80]}{'…' if len(args.link) > 80 else ''}: {args.out} ({len(html) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
