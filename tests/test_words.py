"""One word, one meaning (the README's "Words the lab uses"): senses the code has retired stay out of it. A plan
is a placement plan, never a data-parallel job's layout; a stage is a process of a placement run, never one
piece's costs. Static reading of the source; each rule is also shown to catch the retired sense it names."""
from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

#: (files, pattern of the retired sense, what the word means instead)
RETIRED = (
    (("lab/train/layout.py", "lab/machine/predict.py"), r"\bplans?\b",
     "a data-parallel job's layout is its layout (JobLayout); a plan is a placement plan"),
    (("lab/modelled/placement/executor.py", "lab/machine/plans.py"), r"\bStages?\b|\bstages\b",
     "one piece with its costs is a PieceCost; a stage is one process of a placement run"),
)


def breaches(text: str, pattern: str) -> list[int]:
    """Line numbers of ``text`` where ``pattern`` occurs in the code or its comments and docstrings."""
    return [i for i, line in enumerate(text.splitlines(), 1) if re.search(pattern, line)]


@pytest.mark.parametrize("files,pattern,meaning", RETIRED)
def test_a_retired_sense_stays_out(files, pattern, meaning):
    found = [f"{f}:{n}" for f in files for n in breaches((ROOT / f).read_text(), pattern)]
    assert found == [], f"{meaning}: {found}"


def test_each_rule_catches_its_retired_sense():
    assert breaches("x = 1\nplan = job_layout(sc)\n", RETIRED[0][1]) == [2]
    assert breaches("layout = job_layout(sc)\n", RETIRED[0][1]) == []
    assert breaches("st = [Stage(0, 'a')]\n", RETIRED[1][1]) == [1]
    assert breaches("def tasks(stages):\n", RETIRED[1][1]) == [1]
    assert breaches("st = [PieceCost(0, 'a')]  # one process: a stage\n", RETIRED[1][1]) == []
