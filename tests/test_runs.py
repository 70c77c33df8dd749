"""The run store: runs and metrics in SQLite, statuses, export, and a writer with concurrent readers."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import threading

import pandas as pd
import pytest

from lab.errors import LabError
from lab.runs import JOB_WORKER, METRIC_COLUMNS, RunStore, default_db_path, safe_filename, store
from lab.scenario import default_scenario
from tests.conftest import ROOT


def _rows(steps, workers=2):
    out = []
    for s in range(1, steps + 1):
        for w in range(workers):
            out.append({"step": s, "worker": w, "loss": 2.0 / s, "bytes_sent": 100.0, "bytes_recv": 100.0,
                        "t_compute": 0.01, "t_comm": 0.002, "t_compress": 0.0, "t_idle": 0.001 * w,
                        "t_emul_compute": 0.0, "t_emul_comm": 0.0, "samples_per_s": 3200.0, "wall": 0.02 * s})
        out.append({"step": s, "worker": JOB_WORKER, "loss": 2.0 / s, "test_acc": 0.5 + 0.01 * s if s % 5 == 0 else None,
                    "bytes_sent": 200.0, "bytes_recv": 200.0, "samples_per_s": 6400.0, "wall": 0.02 * s})
    return out


def test_default_location_follows_lab_db(lab_db, tmp_path, monkeypatch):
    assert default_db_path() == lab_db
    s = store()
    s.create_run(default_scenario())
    assert lab_db.exists()
    assert sqlite3.connect(lab_db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    monkeypatch.delenv("LAB_DB")
    assert str(default_db_path()) == "data/runs.db"


def test_runs_metrics_summary_and_delete(tmp_path):
    s = RunStore(tmp_path / "runs.db")
    sc = default_scenario()
    a = s.create_run(sc, name="first")
    b = s.create_run(sc.replace(training=sc.training.replace(optimizer="adabelief")), name="second")
    assert s.status(a) == "queued"
    assert s.set_status(a, "running")
    assert not s.set_status(a, "running", only_from=("queued",))  # first writer wins
    s.add_metrics(a, _rows(10))
    assert s.set_status(a, "done", only_from=("running",))
    assert not s.set_status(a, "failed", error="late", only_from=("running",))
    run = s.get_run(a)
    assert run["status"] == "done" and run["error"] is None and run["end"] >= run["start"]
    assert run["scenario"]["training"]["optimizer"] == "adam"

    runs = s.list_runs()
    assert list(runs.id) == [b, a] and list(runs.optimizer) == ["adabelief", "adam"]
    assert list(s.list_runs(statuses=["queued"]).id) == [b]

    m = s.metrics(a)
    assert len(m) == 30 and set(METRIC_COLUMNS) <= set(m.columns)
    assert s.metrics(a, worker=JOB_WORKER).test_acc.dropna().tolist() == [0.55, 0.6]
    assert s.progress(a) == 10 and s.progress(b) == 0

    summ = s.summary([a]).iloc[0]
    assert summ.final_test_acc == pytest.approx(0.6) and summ.best_test_acc == pytest.approx(0.6)
    assert summ.steps == 10 and summ.wall_s == pytest.approx(0.2)
    assert summ.bytes_sent == pytest.approx(2 * 10 * 100.0)
    assert summ.t_compute == pytest.approx(0.1) and summ.t_idle == pytest.approx(0.005)

    ck = s.checkpoint_dir(a)
    (ck / "final.pt").write_bytes(b"x")
    s.delete_run(a)
    assert not ck.exists()
    assert list(s.list_runs().id) == [b] and len(s.metrics(a)) == 0
    with pytest.raises(LabError, match="no run"):
        s.get_run(a)


def test_nan_is_stored_as_null_and_bad_input_is_refused(tmp_path):
    s = RunStore(tmp_path / "r.db")
    rid = s.create_run(default_scenario(), run_id="my-run_1")
    s.add_metrics(rid, [{"step": 1, "worker": -1, "loss": math.nan}, {"step": 2, "worker": -1, "loss": math.inf}])
    assert s.metrics(rid).loss.isna().all()
    with pytest.raises(LabError, match="already exists"):
        s.create_run(default_scenario(), run_id="my-run_1")
    for bad in ("../x", "a/b", ".hidden", "x" * 65, "a b"):
        with pytest.raises(LabError, match="not a valid run id"):
            s.create_run(default_scenario(), run_id=bad)
    with pytest.raises(LabError, match="unknown status"):
        s.set_status(rid, "exploded")


@pytest.mark.parametrize("name,expected", [("../../etc/passwd", "etc_passwd.csv"), ("/abs/path", "abs_path.csv"),
                                           ("..", "export.csv"), ("my runs (3).csv", "my_runs_3.csv"),
                                           ("a\x00b", "a_b.csv")])
def test_export_names_cannot_leave_the_folder(name, expected):
    assert safe_filename(name, ".csv") == expected


def test_export_csv_and_json(tmp_path):
    s = RunStore(tmp_path / "r.db")
    rid = s.create_run(default_scenario(), name="exp")
    s.add_metrics(rid, _rows(3))
    out = tmp_path / "out"
    path = s.export_csv([rid], out, "../../escape")
    assert path.parent == out.resolve() and path.name == "escape.csv"
    df = pd.read_csv(path)
    assert len(df) == 9 and set(df.run_name) == {"exp"}
    jpath = s.export_json([rid], out, "runs")
    doc = json.loads(jpath.read_text())
    assert doc["format"] == "hetlab-runs/1" and doc["runs"][0]["id"] == rid
    assert len(doc["runs"][0]["metrics"]) == 9 and doc["units"]["t_idle"] == "s"


WRITER = """
import sys, time
from lab.runs import RunStore
s = RunStore(sys.argv[1])
rid = sys.argv[2]
s.set_status(rid, "running")
for step in range(1, 201):
    s.add_metrics(rid, [{"step": step, "worker": w, "loss": 1.0 / step, "wall": step * 0.001} for w in (-1, 0, 1)])
s.set_status(rid, "done")
"""


def test_one_writer_process_and_concurrent_readers(tmp_path):
    db = tmp_path / "runs.db"
    s = RunStore(db)
    rid = s.create_run(default_scenario())
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db), rid], cwd=ROOT)
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    errors = []

    def reader(k):
        r = RunStore(db)  # own object, own connection per thread
        try:
            while True:
                m = r.metrics(rid)
                seen[k].append(len(m))
                assert len(m) % 3 == 0  # a step's three rows arrive in one transaction
                r.list_runs()
                if r.status(rid) == "done":
                    seen[k].append(len(r.metrics(rid)))
                    return
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in seen]
    for t in threads:
        t.start()
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for counts in seen.values():
        assert counts == sorted(counts) and counts[-1] == 600
    assert s.status(rid) == "done"


def test_checkpoints_go_next_to_the_store_or_lab_data(tmp_path, monkeypatch):
    s = RunStore(tmp_path / "a" / "runs.db")
    monkeypatch.delenv("LAB_DATA", raising=False)
    assert s.checkpoint_dir("r1") == (tmp_path / "a").resolve() / "checkpoints" / "r1"
    monkeypatch.setenv("LAB_DATA", str(tmp_path / "b"))
    assert s.checkpoint_dir("r1") == tmp_path / "b" / "checkpoints" / "r1"
    with pytest.raises(LabError):
        s.checkpoint_dir("../r1")
