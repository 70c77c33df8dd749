"""Time each page's first run under AppTest (median of several) and print a table.

The peer is an empty page (app.py routing to a page that only writes a title), measured in the same
run: the ratio says how much of a page's time is its own work rather than Streamlit's overhead.
Target: every page well under 1.5 s here.

    .venv/bin/python bench/bench_pages.py [--repeat 5]
"""

from __future__ import annotations

import argparse
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.py"
        empty.write_text("import streamlit as st\nst.title('empty')\n")
        base = statistics.median(first_run_seconds(None, empty) for _ in range(args.repeat))
        rows = []
        for file, title, _ in available_pages():
            page = None if file == "pages/home.py" else file  # home is the default page: time the app's first run
            times = [first_run_seconds(page) for _ in range(args.repeat)]
            rows.append((title, statistics.median(times), max(times)))
    print("max s includes the process's first imports (cold start)")
    print(f"{'page':<14} {'median s':>9} {'max s':>7} {'x empty page':>13} {'< 1.5 s':>8}")
    print(f"{'(empty page)':<14} {base:9.3f} {'':>7} {1.0:13.1f}")
    for title, med, mx in rows:
        print(f"{title:<14} {med:9.3f} {mx:7.3f} {med / base:13.1f} {'yes' if med < 1.5 else 'NO':>8}")


if __name__ == "__main__":
    main()
