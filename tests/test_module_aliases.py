"""No module goes by a one-letter alias: a reader meets ``P.ranking_line`` and cannot tell which of two
modules named P it is. The field's own conventions stay (torch.nn.functional as F; numpy and pandas as
np and pd are not one letter). Static reading (ast) of every Python file of the checkout."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

ALLOWED = {("torch.nn.functional", "F"), ("torch.nn", "F")}  # ``from torch.nn import functional as F``
TREES = ("lab", "ui", "pages", "bench", "tests", "scripts")


def one_letter_aliases(source: str) -> list[tuple[int, str, str]]:
    """(line, module, alias) of every import of ``source`` bound to a one-letter name."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, a.asname) for a in node.names if a.asname and len(a.asname) == 1
                    and (a.name, a.asname) not in ALLOWED]
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, f"{node.module}.{a.name}", a.asname) for a in node.names
                    if a.asname and len(a.asname) == 1 and (node.module, a.asname) not in ALLOWED]
    return out


def python_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for tree in TREES:
        if (ROOT / tree).is_dir():
            files += sorted((ROOT / tree).rglob("*.py"))
    return files


def test_no_module_is_imported_under_a_one_letter_name():
    found = [f"{p.relative_to(ROOT)}:{line}: {mod} as {alias}" for p in python_files()
             for line, mod, alias in one_letter_aliases(p.read_text())]
    assert not found, "\n".join(found)


def test_the_check_sees_an_alias_at_any_depth_and_keeps_the_fields_conventions():
    planted = ("import torch.nn.functional as F\nimport numpy as np\n"
               "def f():\n    from lab.view.placement import plans as P\n    import lab.train.data as D\n")
    assert one_letter_aliases(planted) == [(4, "lab.view.placement.plans", "P"), (5, "lab.train.data", "D")]
