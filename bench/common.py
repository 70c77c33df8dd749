"""What every bench script shares: the lab importable from a checkout, and one plain-text table."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a bench runs as a script from a checkout, not an installed package
    sys.path.insert(0, str(ROOT))


def table(header: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the numbers right-aligned."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r))

    return "\n".join([line(cells[0]), "  ".join("-" * x for x in w)] + [line(r) for r in cells[1:]])
