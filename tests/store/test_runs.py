"""The run store: runs and metrics in SQLite, statuses, export, and a writer with concurrent readers."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from lab.errors import LabError
from lab.scenario.document import default_scenario
from lab.store.runs import (
    JOB_WORKER,
    METRIC_COLUMNS,
    RunStore,
    default_db_path,
    safe_filename,
    run_store,
)
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
    s = run_store()
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


WRITER = """
import sys, time
from lab.store.runs import RunStore
s = RunStore(sys.argv[1])
rid = sys.argv[2]
s.set_status(rid, "running")
for step in range(1, 201):
    s.add_metrics(rid, [{"step": step, "worker": w, "loss": 1.0 / step, "wall": step * 0.001} for w in (-1, 0, 1)])
s.set_status(rid, "done")
"""


def test_one_writer_process_and_concurrent_readers(tmp_path, spawns):
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


# ----- lifecycle tables, old stores, a writer killed mid-run ---------------------------
OLD_SCHEMA = """
CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, scenario TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, start REAL, "end" REAL, error TEXT, pid INTEGER, info TEXT);
CREATE TABLE metrics (run_id TEXT NOT NULL, step INTEGER NOT NULL, worker INTEGER NOT NULL,
    loss REAL, test_acc REAL, bytes_sent REAL, bytes_recv REAL, t_compute REAL, t_comm REAL, t_compress REAL,
    t_idle REAL, t_emul_compute REAL, t_emul_comm REAL, samples_per_s REAL, wall REAL,
    PRIMARY KEY (run_id, step, worker)) WITHOUT ROWID;
"""


def test_an_older_store_gains_the_lifecycle_tables_and_keeps_its_rows(tmp_path):
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(OLD_SCHEMA)
    conn.execute("INSERT INTO runs (id, name, scenario, status, created, info) VALUES (?,?,?,?,?,?)",
                 ("old-run", "from last year", json.dumps(default_scenario().to_dict()), "done", 1.0, "{}"))
    conn.execute("INSERT INTO metrics (run_id, step, worker, loss) VALUES ('old-run', 1, -1, 2.5)")
    conn.commit()
    conn.close()
    s = RunStore(db)
    assert s.get_run("old-run")["name"] == "from last year"
    assert s.metrics("old-run").loss.tolist() == [2.5]
    assert s.job_records.events("old-run").empty and s.job_records.heartbeats("old-run").empty
    s.job_records.add_event("old-run", "released", detail={"by": "test"})
    s.job_records.set_heartbeats("old-run", [{"worker": 0, "step": 3, "phase": "busy", "t": 5.0, "progress_t": 4.0}])
    again = RunStore(db)  # a second opening runs the schema again: nothing changes
    assert list(again.job_records.events("old-run").event) == ["released"]
    assert again.job_records.heartbeats("old-run").step.tolist() == [3]
    assert again.metrics("old-run").loss.tolist() == [2.5]


def test_stages_heartbeats_discard_and_find(tmp_path):
    s = RunStore(tmp_path / "r.db")
    rid = s.create_run(default_scenario(), info={"elastic_run_id": "abc", "owner": "me"})
    other = s.create_run(default_scenario(), info={"elastic_run_id": "xyz"})
    assert s.find_run(elastic_run_id="abc") == rid and s.find_run(elastic_run_id="nope") is None
    with pytest.raises(LabError, match="unknown job event"):
        s.job_records.add_event(rid, "teleported")
    with pytest.raises(LabError):
        s.find_run(**{"a') OR 1=1 --": 1})
    for k, st in enumerate(["submitted", "parsed", "scheduled"]):
        s.job_records.add_event(rid, st, attempt=0, step=None if k < 2 else 0, detail={"k": k})
    s.job_records.add_event(other, "submitted")
    ev = s.job_records.events(rid)
    assert list(ev.event) == ["submitted", "parsed", "scheduled"] and ev.detail.iloc[2] == {"k": 2}
    assert s.job_records.last_event(rid)["event"] == "scheduled" and s.job_records.last_event(rid, "parsed")["detail"] == {"k": 1}
    assert len(s.job_records.events()) == 4 and s.job_records.events([]).empty
    s.add_metrics(rid, _rows(8))
    assert s.discard_after(rid, 5) == 9  # 3 rows per step (2 workers and the job) for steps 6-8
    assert s.metrics(rid).step.max() == 5 and len(s.metrics(rid)) == 15
    s.job_records.set_heartbeats(rid, [{"worker": w, "step": 5, "phase": "comm", "t": 1.0, "progress_t": 1.0} for w in (1, 0)])
    assert s.job_records.heartbeats(rid).worker.tolist() == [0, 1]
    s.job_records.set_heartbeats(rid, [])
    assert s.job_records.heartbeats(rid).empty
    s.delete_run(rid)
    assert s.job_records.events(rid).empty and len(s.job_records.events()) == 1


KILLED_WRITER = """
import sys, time
from lab.store.runs import RunStore
s = RunStore(sys.argv[1])
rid = sys.argv[2]
step = 0
while True:
    step += 1
    with s._write() as c:  # one transaction per step; every 4th stays open a while (a kill lands inside)
        c.executemany("INSERT INTO metrics (run_id, step, worker, loss) VALUES (?,?,?,?)",
                      [(rid, step, w, 1.0 / step) for w in (-1, 0, 1)])
        c.execute("INSERT INTO job_events (run_id, t, event, attempt, step) VALUES (?,?,?,?,?)",
                  (rid, time.time(), "running", 0, step))
        if step % 4 == 0:
            time.sleep(0.02)
    print(step, flush=True)
"""


def test_the_store_survives_a_kill_9_of_its_writer_mid_run(tmp_path, spawns):
    import os
    import signal

    db = tmp_path / "runs.db"
    s = RunStore(db)
    rid = s.create_run(default_scenario(), status="running")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(db), rid], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    committed = []
    try:
        for line in proc.stdout:
            committed.append(int(line))
            if len(committed) >= 60:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    fresh = RunStore(db)  # a new process's view: opens, recovers the WAL, nothing committed is lost
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    m = fresh.metrics(rid)
    per_step = m.groupby("step").worker.count()
    assert set(committed) <= set(per_step.index)  # every step the writer saw committed is there
    assert (per_step == 3).all()  # and no step is half there
    assert sorted(per_step.index) == list(range(1, len(per_step) + 1))
    assert len(per_step) >= len(committed)  # (it went on writing between our reading and the kill)
    assert fresh.job_records.events(rid).step.tolist() == sorted(per_step.index)
    fresh.job_records.add_event(rid, "ended", detail={"status": "interrupted"})  # and it still takes writes
    assert fresh.job_records.last_event(rid)["event"] == "ended"


@settings(max_examples=200, deadline=None)
@given(hst.text(max_size=300))
def test_no_export_name_leaves_the_export_folder(tmp_path_factory, name):
    folder = (tmp_path_factory.getbasetemp() / "exports").resolve()
    path = (folder / safe_filename(name, ".csv")).resolve()
    assert path.parent == folder and path.suffix == ".csv" and len(path.name) <= 110


def test_one_launcher_claims_a_queued_run_and_a_second_claim_writes_nothing(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    rid = store.create_run(default_scenario(), status="queued")
    first = {"pid": 101, "pgid": 101, "created": 1.5, "host": "h", "boot": "b"}
    results = []
    barrier = threading.Barrier(4)

    def claim(k):
        barrier.wait()
        results.append((k, store.job_records.claim(rid, **{**first, "pid": 101 + k})))

    threads = [threading.Thread(target=claim, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [k for k, ok in results if ok]
    assert len(winners) == 1  # a job never runs twice
    run, rec = store.get_run(rid), store.job_records.launcher(rid)
    assert run["status"] == "running" and run["pid"] == rec["pid"] == 101 + winners[0] and run["start"]
    assert {k: rec[k] for k in ("pgid", "created", "host", "boot")} == {"pgid": 101, "created": 1.5, "host": "h",
                                                                         "boot": "b"}
    stopped = store.create_run(default_scenario(), status="queued")
    store.set_status(stopped, "stopped")
    assert not store.job_records.claim(stopped, **first) and store.job_records.launcher(stopped) is None
    with pytest.raises(LabError, match="unknown launcher field"):
        store.job_records.claim(rid, pid_start=3)


def test_an_older_store_gains_the_launchers_new_columns(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE launchers (run_id TEXT PRIMARY KEY, pid INTEGER, host TEXT, boot TEXT, "
                  "pid_start INTEGER, scratch TEXT, started REAL, beat REAL)")
        c.execute("INSERT INTO launchers (run_id, pid, pid_start) VALUES ('old-run', 7, 123)")
    store = RunStore(path)
    assert store.job_records.launcher("old-run")["pgid"] is None  # kept, with the new columns empty
    rid = store.create_run(default_scenario(), status="queued")
    assert store.job_records.claim(rid, pid=9, pgid=9, created=2.0)
    assert store.job_records.launcher(rid)["created"] == 2.0


def test_an_older_stores_lifecycle_table_becomes_the_job_events_with_its_rows(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as c:
        c.executescript("""
CREATE TABLE stages (seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, t REAL NOT NULL,
    stage TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, step INTEGER, worker INTEGER, detail TEXT);
CREATE INDEX stages_by_run ON stages (run_id, seq);
INSERT INTO stages (run_id, t, stage, detail) VALUES ('r1', 1.0, 'submitted', '{}'), ('r1', 2.0, 'started', '{"w": 2}');
""")
    s = RunStore(path)
    ev = s.job_records.events("r1")
    assert list(ev.event) == ["submitted", "started"] and ev.detail.iloc[1] == {"w": 2}
    s.job_records.add_event("r1", "ended")
    assert s.job_records.last_event("r1")["event"] == "ended"
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "stages" not in tables and "job_events" in tables
    assert RunStore(path).job_records.events("r1").event.tolist() == ["submitted", "started", "ended"]  # opened again


def test_a_recorded_step_is_stored_in_an_older_store_and_in_one_a_newer_version_widened(tmp_path):
    # An older store: plan_events without the columns a message's name needs; they are added when it is opened
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as c:
        c.execute("CREATE TABLE plan_events (run_id TEXT NOT NULL, step INTEGER NOT NULL, rank INTEGER NOT NULL, "
                  "device TEXT, kind TEXT, op TEXT, piece INTEGER, micro INTEGER, start REAL, \"end\" REAL, src TEXT, "
                  "dst TEXT, bytes REAL, wait REAL)")
    row = {"rank": 1, "kind": "activation", "src": "a", "dst": "b", "piece": 1, "micro": 0, "start": 0.1, "end": 0.2,
           "bytes": 8.0, "wait": 0.0, "called": 0.05, "from_piece": 0, "output": 2, "device": "b"}
    for path, widen in ((old, False), (tmp_path / "new.db", True)):
        store = RunStore(path)
        rid = store.create_run(default_scenario(), status="running")
        if widen:  # a newer version added a column of its own: rows are written by name, so this one still writes
            with sqlite3.connect(path) as c:
                c.execute("ALTER TABLE plan_events ADD COLUMN later_field REAL")
        assert store.job_records.add_plan_events(rid, 3, [row]) == 1
        got = store.job_records.plan_events(rid).iloc[0]
        assert (got.from_piece, got.output, got.called, got.kind) == (0, 2, 0.05, "activation"), path
