"""The page seam: a page is layout over its own page model. Every file in pages/ stays within 120 lines and
imports only streamlit, ``ui`` and its own module of ``lab.view``, and reaches the job manager only through its
page model's desk; nothing imports the router (app.py), and the
modules of ``ui`` import each other in no circle (imports inside functions count). Static reading of the source
(ast): a page is checked without running it."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from tests.conftest import ROOT

MAX_PAGE_LINES = 120


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if node.module in ("lab.view", "ui")}
    return out


def manager_breaches(path: Path) -> list[str]:
    """Where a page holds the job manager itself: ``ui.job_manager()`` anywhere but straight into its page
    model's desk (``view.<Name>Desk(*ui.job_manager(), ...)``)."""
    tree = ast.parse(path.read_text())
    handed = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("Desk")
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "view"):
            handed |= {id(a.value) for a in node.args if isinstance(a, ast.Starred)}
    return [f"{path.name}:{node.lineno} holds the job manager (hand ui.job_manager() to its page model's desk)"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "job_manager"
            and id(node) not in handed]


def page_breaches(path: Path) -> list[str]:
    own = f"lab.view.{path.stem}"
    out = manager_breaches(path)
    lines = len(path.read_text().splitlines())
    if lines > MAX_PAGE_LINES:
        out.append(f"{path.name}: {lines} lines (at most {MAX_PAGE_LINES})")
    for m in sorted(imports(path)):
        if m == "streamlit" or m.startswith("streamlit.") or m == "ui" or m == own or m.startswith(own + "."):
            continue
        if m == "lab.view":  # `from lab.view import <own> as view` names the module itself
            continue
        out.append(f"{path.name} imports {m}")
    return out


def test_every_page_is_layout_over_its_own_page_model():
    pages = sorted((ROOT / "pages").glob("*.py"))
    assert len(pages) >= 12
    assert [b for p in pages for b in page_breaches(p)] == []


def test_the_seam_check_refuses_a_long_page_and_a_page_reaching_past_its_model(tmp_path):
    bad = tmp_path / "training.py"
    bad.write_text("import streamlit as st\nimport ui\nfrom lab.view import training as view\n"
                   "from lab.jobs.manager import JobManager\n\ndef f():\n    from app import PAGES\n"
                   "jm, owner = ui.job_manager()\ndesk = view.TrainingDesk(*ui.job_manager())\n"
                   + "st.write(1)\n" * MAX_PAGE_LINES)
    found = page_breaches(bad)
    assert f"training.py: {MAX_PAGE_LINES + 9} lines (at most {MAX_PAGE_LINES})" in found
    assert [b for b in found if "job manager" in b] == [
        "training.py:8 holds the job manager (hand ui.job_manager() to its page model's desk)"]
    assert "training.py imports lab.jobs.manager" in found and "training.py imports app" in found
    assert "training.py imports lab.view.training" not in found


def test_nothing_imports_the_router_and_ui_has_no_circle():
    users = [str(p.relative_to(ROOT)) for d in ("lab", "ui", "pages") for p in (ROOT / d).rglob("*.py")
             if "app" in imports(p)]
    assert users == []
    graph = nx.DiGraph()
    for p in (ROOT / "ui").glob("*.py"):
        mod = f"ui.{p.stem}" if p.stem != "__init__" else "ui"
        graph.add_node(mod)
        for m in imports(p):
            if m.startswith("ui.") and m != mod and (ROOT / "ui" / f"{m.split('.')[1]}.py").exists():
                graph.add_edge(mod, "ui." + m.split(".")[1])
    assert list(nx.simple_cycles(graph.subgraph(n for n in graph if n != "ui"))) == []
