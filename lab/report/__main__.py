"""``python -m lab.report --link '<the page link>' --out report.html``: the report of a page link, made without a
browser. The page runs headless in Streamlit, which ``lab`` never imports: this starts ``ui.report_cli`` in a
process of its own and passes its exit code on.

The link and the file are checked here first (:mod:`lab.report.link`): a refusal is one line on stderr and exit
code 2, with none of the lines Streamlit logs as the page's process starts."""

import argparse
import subprocess
import sys
from pathlib import Path

from lab.errors import LabError
from lab.report.link import check_link, check_out

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(add_help=False)  # the page's process has the whole command line and its help
    ap.add_argument("--link")
    ap.add_argument("--out")
    given, _ = ap.parse_known_args(argv)
    try:
        if given.link is not None:
            check_link(given.link)
        if given.out is not None:
            check_out(given.out)
    except LabError as exc:
        print(f"no report: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, "-m", "ui.report_cli", *argv], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
