"""Every script of bench/ runs in its smoke mode (its smallest sizes, seconds) and prints its table and, last, its score
line: a bench that no longer runs, or that scores a number it did not measure, is a red test here, not a surprise on
the day it is needed."""

from __future__ import annotations

import math
import os
import re
import sys

import pytest

from bench.common import run_in_session, score
from tests.conftest import ROOT

BENCHES = sorted((ROOT / "bench").glob("bench_*.py"))

# One item of a score line: a label (it may hold spaces and digits; none when the number leads), its number, and a
# unit (``x`` stands against it).
SCORE_ITEM = re.compile(r"(?:(?P<label>.+?) )?(?P<number>-?\d+(?:\.\d+)?)(?P<unit>x| .+)?")


def score_numbers(line: str, name: str) -> list[float]:
    """The numbers of ``line``, which must be the score line ``<name>: <label> <number> <unit>, ...`` (not a
    "no score" line), one number per item, each a finite float."""
    assert line.startswith(f"{name}: "), f"not a score line of {name!r}: {line!r}"
    assert not line.startswith(f"{name}: no score"), line
    # A number the bench did not measure would print as nan, inf or None: none may stand anywhere in the line.
    assert not re.search(r"\b(nan|inf|none)\b", line, re.IGNORECASE), line
    numbers = []
    for item in line[len(name) + 2:].split(", "):
        m = SCORE_ITEM.fullmatch(item)
        assert m, f"{item!r} is not '<label> <number> <unit>' in {line!r}"
        numbers.append(float(m["number"]))
    assert all(math.isfinite(x) for x in numbers), line
    return numbers


def test_a_score_prints_its_numbers_on_one_line(capsys):
    score("plan", [("runs", 12), ("held-out geomean error", 23.14, "%", 1), ("worst", 40.4, "%", 0),
                   ("kendall tau", 0.8), ("overhead", 1.049, "x")])
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == "plan: runs 12, held-out geomean error 23.1 %, worst 40 %, kendall tau 0.80, overhead 1.05x"
    assert score_numbers(line, "plan") == [12, 23.1, 40, 0.8, 1.05]
    score("schedules", [("", 2, "schedules"), ("best step vs gpipe", 0.912, "x")])
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == "schedules: 2 schedules, best step vs gpipe 0.91x"  # a count may lead its item
    assert score_numbers(line, "schedules") == [2, 0.91]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, None], ids=str)
def test_a_value_that_is_not_a_number_is_no_score(bad, capsys):
    with pytest.raises(SystemExit) as e:
        score("fidelity", [("runs", 3), ("quiet", bad, "%", 1), ("flagged", 0)],
              why_not="every run was measured under load")
    assert e.value.code == 1
    out = capsys.readouterr().out
    line = out.splitlines()[-1]
    assert line == f"fidelity: no score: quiet is {bad}: every run was measured under load"
    assert "runs 3" not in out  # no half score is printed before it
    with pytest.raises(AssertionError):
        score_numbers(line, "fidelity")


def test_no_score_names_each_missing_value_with_its_own_reason(capsys):
    with pytest.raises(SystemExit) as e:
        score("optim", [("adabelief/adam_foreach", 1.2, "x"), ("adam_fused/adam_foreach", None, "x"),
                        ("lab_fused/adam_fused", math.nan, "x")],
              why_not={"adam_fused/adam_foreach": "torch's fused Adam did not run"})
    assert e.value.code == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "optim: no score: adam_fused/adam_foreach is None (torch's fused Adam did not run), "
        "lab_fused/adam_fused is nan")
    with pytest.raises(SystemExit):
        score("optim", [])
    assert capsys.readouterr().out == "optim: no score: nothing was measured\n"


def test_a_reason_that_quotes_a_traceback_stays_on_the_last_line(capsys):
    with pytest.raises(SystemExit):
        score("train", [("training loop", math.nan, "s")], why_not={
            "training loop": "the run stored no step: Traceback (most recent call last):\n  File x\nOSError: y"})
    assert capsys.readouterr().out == ("train: no score: training loop is nan (the run stored no step: Traceback "
                                       "(most recent call last): File x OSError: y)\n")


def test_every_bench_script_is_here():
    assert len(BENCHES) >= 19


# bench_cluster starts a Ray cluster: it runs on the test worker that runs the other clusters, one at a time
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xdist_group("ray")) if p.stem == "bench_cluster"
                                  else p for p in BENCHES], ids=lambda p: p.stem)
def test_a_bench_runs_in_its_smoke_mode_and_prints_its_table_and_score(path, tmp_path, spawns):
    # Its own run store and data folder: a smoke run leaves nothing in the checkout.
    env = dict(os.environ, PYTHONPATH=str(ROOT), LAB_DB=str(tmp_path / "runs.db"), LAB_DATA=str(tmp_path),
               TMPDIR=str(tmp_path))
    proc = run_in_session([sys.executable, str(path), "--smoke"], 240, cwd=ROOT, env=env)
    out, err = proc.stdout, proc.stderr
    # A bench that scores no number exits 1 and says why on its last line.
    assert proc.returncode == 0, f"{path.name} --smoke exited {proc.returncode}:\n{out[-500:]}\n{err[-3000:]}"
    lines = out.splitlines()
    # bench.common.table draws a rule of dashes under its header: at least one table was printed.
    assert any(line.strip() and set(line.replace(" ", "")) == {"-"} for line in lines), out[-2000:]
    # Its last line is its score, named after it (bench_job_path: "job path"): numbers even in a smoke run.
    assert lines, err[-3000:]
    score_numbers(lines[-1], path.stem.removeprefix("bench_").replace("_", " "))
