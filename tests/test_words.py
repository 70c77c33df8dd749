"""One word, one meaning (the README's "Words the lab uses"): senses the code has retired stay out of it. A plan
is a placement plan, never a data-parallel job's layout; a stage is a process of a placement run, never one
piece's costs; a piece has one type, with or without its costs; the run store's shared object is ``run_store()`` wherever it is imported; a Ray cluster's address is
``ray_address``, never ``cluster`` (a cluster is the drawn topology); a control's type, default and allowed
values are its setting, never its spec. Static reading of the source; each rule is also shown to catch the retired sense it names."""
from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

EVERY = "every Python file"  # every file of the checkout but this one, which names the retired senses

#: The page models, the report, the figures, the page helpers, the benches that read the controls and the Scenario's
#: own table: where a setting was once a spec.
VIEW_FILES = tuple(sorted(str(p.relative_to(ROOT)) for d in ("lab/view", "lab/report", "lab/figures", "ui", "bench")
                          for p in (ROOT / d).rglob("*.py"))) + ("lab/scenario/document.py",)

#: (files, pattern of the retired sense, what the word means instead)
RETIRED = (
    (("lab/train/layout.py", "lab/machine/predict.py"), r"\bplans?\b",
     "a data-parallel job's layout is its layout (JobLayout); a plan is a placement plan"),
    (("lab/modelled/placement/executor.py", "lab/machine/plans.py"), r"\bStages?\b|\bstages\b",
     "a piece of the model is a Piece; a stage is one process of a placement run"),
    (EVERY, r"\bPieceCost\b|\bpiece_costs\b|pipeline import .*\bPiece\b",
     "a piece of the model, with or without its costs, is lab.modelled.placement.order.Piece; the executor's cut "
     "piece extends it"),
    (EVERY, r"from lab\.store\.runs import .*\b(store|run_store as \w+)\b",
     "the run store's shared object is imported as run_store, under no other name"),
    (("lab/jobs/manager.py", "lab/jobs/running.py", "lab/train/launcher.py", "lab/train/ranks.py", "lab/train/ray_ranks.py",
      "lab/view/jobs/page.py", "bench/bench_cluster.py"), r"\b(self|jm|spec)\.cluster\b|\bcluster: str\b|\bcluster=",
     "a Ray cluster's address is ray_address; a cluster is the drawn topology"),
    (VIEW_FILES, r"\bspec\b", "a control's type, default and allowed values are its setting; a spec is a job spec"),
)


def files_of(files) -> list[str]:
    if files != EVERY:
        return list(files)
    found = [ROOT / "app.py"] + [p for d in ("lab", "ui", "pages", "bench", "tests") for p in (ROOT / d).rglob("*.py")]
    return sorted(str(p.relative_to(ROOT)) for p in found if p.name != "test_words.py")


def breaches(text: str, pattern: str) -> list[int]:
    """Line numbers of ``text`` where ``pattern`` occurs in the code or its comments and docstrings."""
    return [i for i, line in enumerate(text.splitlines(), 1) if re.search(pattern, line)]


@pytest.mark.parametrize("files,pattern,meaning", RETIRED, ids=["layout", "stage", "piece", "run store", "ray address", "setting"])
def test_a_retired_sense_stays_out(files, pattern, meaning):
    found = [f"{f}:{n}" for f in files_of(files) for n in breaches((ROOT / f).read_text(), pattern)]
    assert found == [], f"{meaning}: {found}"


def test_each_rule_catches_its_retired_sense():
    assert breaches("x = 1\nplan = job_layout(sc)\n", RETIRED[0][1]) == [2]
    assert breaches("layout = job_layout(sc)\n", RETIRED[0][1]) == []
    assert breaches("st = [Stage(0, 'a')]\n", RETIRED[1][1]) == [1]
    assert breaches("def tasks(stages):\n", RETIRED[1][1]) == [1]
    assert breaches("st = [Piece(0, 'a')]  # one process: a stage\n", RETIRED[1][1]) == []
    assert breaches("st = [PieceCost(0, 'a')]\n", RETIRED[2][1]) == [1]
    assert breaches("from lab.modelled.placement.pipeline import Piece, simulate\n", RETIRED[2][1]) == [1]
    assert breaches("from lab.modelled.placement.order import Piece\n", RETIRED[2][1]) == []
    assert breaches("from lab.store.runs import ACTIVE, store\n", RETIRED[3][1]) == [1]
    assert breaches("    from lab.store.runs import run_store as default_store\n", RETIRED[3][1]) == [1]
    assert breaches("from lab.store.runs import ACTIVE, run_store\n", RETIRED[3][1]) == []
    assert breaches("jm = JobManager(db, cluster=address)\n", RETIRED[4][1]) == [1]
    assert breaches("if self.cluster:\n", RETIRED[4][1]) == [1]
    assert breaches("    cluster: str = ''\n", RETIRED[4][1]) == [1]
    assert breaches("jm = JobManager(db, ray_address=address)  # the Ray cluster\n", RETIRED[4][1]) == []
    assert breaches("w, spec = box, VIEW[key].spec\n", RETIRED[5][1]) == [1]
    assert breaches("def hidden(key, spec=None):\n", RETIRED[5][1]) == [1]
    assert breaches("w, setting = box, VIEW[key].setting\n", RETIRED[5][1]) == []
