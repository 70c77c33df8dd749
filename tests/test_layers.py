"""The import contract (.importlinter): lab/ imports point down its layers only, and no package's
modules import each other in a cycle; imports inside functions count. The check is import-linter,
run here so the README's test command runs it, and run once more on a copy of lab/ with an upward
import planted, which it must refuse."""
from __future__ import annotations

import pytest

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("spawns")  # every test here starts processes

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(cwd / ".importlinter"), "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)})


def test_the_layers_and_the_acyclic_contract_hold():
    p = _lint(ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "2 kept, 0 broken" in p.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_a_planted_upward_import_inside_a_function_is_refused(tmp_path):
    root = _copy(tmp_path)
    target = root / "lab" / "scenario" / "topology.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from lab.jobs.manager import JobManager\n\n"
                      "    return JobManager\n")
    p = _lint(root)
    assert p.returncode != 0
    assert "lab.scenario is not allowed to import lab.jobs" in p.stdout
    assert "lab.scenario.topology -> lab.jobs.manager" in p.stdout


def test_a_planted_cycle_between_sibling_modules_is_refused(tmp_path):
    root = _copy(tmp_path)
    target = root / "lab" / "train" / "fork.py"  # fork is imported by the launcher; make it import back
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from lab.train import launcher\n\n"
                      "    return launcher\n")
    p = _lint(root)
    assert p.returncode != 0
    assert "No cycles are allowed in lab.train" in p.stdout


def test_every_lab_variable_is_read_through_settings_and_listed_in_the_settings_page():
    import re

    from lab import settings

    table = (ROOT / "docs" / "settings.md").read_text()
    for name in settings.VARIABLES:
        assert f"`{name}`" in table, name
    outside = []
    for f in (ROOT / "lab").rglob("*.py"):
        if f.name == "settings.py":
            continue
        for m in re.finditer(r"os\.environ(?:\.get)?[\[(]\s*[\"'](LAB_\w+)", f.read_text()):
            outside.append(f"{f.relative_to(ROOT)}: {m.group(1)}")
        for m in re.finditer(r"settings\.\w+\(\"(LAB_\w+)\"", f.read_text()):
            assert m.group(1) in settings.VARIABLES or m.group(1) in settings.PROTOCOL, m.group(1)
    assert outside == []


def test_the_launcher_and_the_job_manager_start_without_torch():
    # torch takes seconds to import; a job's launcher and the class server's job manager never need
    # it, so their start-up must not pay for it (only ranks and the pages that compute do).
    code = ("import sys; import lab.train.cli, lab.train.launcher, lab.train.resilience, lab.jobs.manager; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_every_name_a_docstring_or_the_readme_points_at_exists():
    """Words that point at code stay true when code moves: every Sphinx reference in ``lab/``
    (``:func:`lab.x.y``` and the like) names an object that imports, and every path the README and
    ``docs/`` quote is a file or folder of the checkout."""
    import importlib
    import re

    pattern = re.compile(r":(?:func|class|mod|meth|data|attr):`~?(lab(?:\.[A-Za-z_]\w*)+)`")
    broken = []
    for f in sorted((ROOT / "lab").rglob("*.py")):
        for ref in pattern.findall(f.read_text()):
            parts = ref.split(".")
            for i in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                for name in parts[i:]:
                    obj = getattr(obj, name, None)
                if obj is None:
                    broken.append(f"{f.relative_to(ROOT)}: {ref}")
                break
            else:
                broken.append(f"{f.relative_to(ROOT)}: {ref}")
    text = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    quoted = set(re.findall(r"`((?:lab|bench|tests|pages|assets|scripts|docs)/[\w./-]+)`", text))
    broken += [f"README or docs: {p}" for p in sorted(quoted) if not (ROOT / p).exists()]
    assert len(quoted) > 20 and not broken, broken
