"""``python -m lab.report --link '<the page link>' --out report.html``: the report of a page link, made without a
browser. The page runs headless in Streamlit, which ``lab`` never imports: this starts ``ui.report_cli`` in a
process of its own and passes its exit code on."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

if __name__ == "__main__":
    sys.exit(subprocess.call([sys.executable, "-m", "ui.report_cli", *sys.argv[1:]], cwd=ROOT))
