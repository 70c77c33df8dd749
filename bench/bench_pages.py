"""Time each page's first run under AppTest (median of several) and print a table.

The peer is an empty page (app.py routing to a page that only writes a title), measured in the same
run: the ratio says how much of a page's time is its own work rather than Streamlit's overhead.
Target: every page well under 1.5 s here.

    .venv/bin/python bench/bench_pages.py [--repeat 5] [--smoke]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import logging  # noqa: E402

from streamlit.testing.v1 import AppTest  # noqa: E402

logging.getLogger("streamlit").setLevel(logging.ERROR)

from app import available_pages  # noqa: E402
from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402
from lab.train.warm import shared_starter  # noqa: E402


def first_run_seconds(page: str | None, script: Path | None = None) -> float:
    at = AppTest.from_file(str(script or ROOT / "app.py"), default_timeout=120)
    if page is None:
        t0 = time.perf_counter()
        at.run()
        return time.perf_counter() - t0
    at.run()  # the home page first, as a visitor arrives
    t0 = time.perf_counter()
    at.switch_page(page)
    at.run()
    elapsed = time.perf_counter() - t0
    if at.exception:
        raise SystemExit(f"{page} raised: {at.exception[0].value}")
    return elapsed


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    pages = available_pages()
    if args.smoke:
        args.repeat = 1
        # one page reached by switching from home, as every page but home is
        pages = [p for p in pages if p[0] != "pages/home.py"][:1]
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:  # the pages open a run store: a smoke run leaves none in the checkout
            os.environ.setdefault("LAB_DB", str(Path(tmp) / "runs.db"))
            os.environ.setdefault("LAB_DATA", tmp)
        empty = Path(tmp) / "empty.py"
        empty.write_text("import streamlit as st\nst.title('empty')\n")
        try:
            base = statistics.median(first_run_seconds(None, empty) for _ in range(args.repeat))
            rows = []
            for file, title, _ in pages:
                page = None if file == "pages/home.py" else file  # home is the default page: time the app's first run
                times = [first_run_seconds(page) for _ in range(args.repeat)]
                rows.append((title, statistics.median(times), max(times)))
        finally:
            shared_starter().stop()  # the app starts its warm starter on its first run
    if args.smoke:
        print(SMOKE_NOTE)
    print("max s includes the process's first imports (cold start)")
    print(table(["page", "median s", "max s", "x empty page", "< 1.5 s"],
                [["(empty page)", f"{base:.3f}", "", f"{1.0:.1f}", ""]] +
                [[title, f"{med:.3f}", f"{mx:.3f}", f"{med / base:.1f}", "yes" if med < 1.5 else "NO"]
                 for title, med, mx in rows]))
    slowest = max(med for _, med, _ in rows)
    score("pages", [("pages timed", len(rows)), ("empty page", base, "s", 3), ("slowest page median", slowest, "s", 3),
                    ("slowest/empty", slowest / base, "x", 1)])


if __name__ == "__main__":
    main()
