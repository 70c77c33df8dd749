"""The run store: one SQLite file holding every training run and its per-step measurements.

Location: the environment variable ``LAB_DB`` when set, else ``./data/runs.db`` (created on first
use). The file is in WAL mode with a busy timeout, so one writer (a training job) and several
readers (pages polling it) work at once. Every process and thread gets its own connection, and
every write is one short transaction.

Tables
------
``runs``: id, name, scenario (JSON), status, created, start, end (Unix seconds), error, pid (of the
job's launcher), info (JSON: what the job measured about itself, e.g. bytes_kind, emulation scales).

``metrics``: one row per (run, step, worker). ``worker`` is the rank; -1 is the whole job (global
training loss, test accuracy, job throughput). Columns (SI units): loss, test_acc (fraction 0..1),
bytes_sent, bytes_recv (bytes in that step), t_compute, t_comm, t_compress, t_idle, t_emul_compute,
t_emul_comm (seconds in that step; t_emul_compute is the part of t_compute that was emulated device
waiting, t_emul_comm the part of t_comm that was emulated link waiting),
samples_per_s, wall (seconds since the run started, at the end of that step).

``job_events``: the job's lifecycle, one row per event: seq, run_id, t (Unix seconds), event
(one of :data:`EVENTS`), attempt (0 for the first start, k after the k-th restart), step, worker,
detail (JSON). ``heartbeats``: the latest heartbeat of each worker of a running job (run_id, worker,
attempt, pid, step, phase, t, progress_t), written by the launcher that watches them.
``launchers``: who runs each job (run_id, pid, pgid (its process group, which holds every process of
the job), created (the process's creation time, so a reused pid is not mistaken for it), host, boot,
scratch (its temporary folder), started, beat (Unix seconds of its last heartbeat)), written by the
launcher when it claims the run (:meth:`lab.store.job_records.JobRecords.claim`); the job manager's sweep reads it to find
launchers that died without a word, and Stop, release and the sweep act on its process group.

Both tables were added after the first release: ``CREATE TABLE IF NOT EXISTS`` on every open adds
them to an older store and leaves its rows alone.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

if TYPE_CHECKING:
    import pandas as pd

from lab import settings
from lab.errors import LabError
from lab.store.classroom import ClassBook
from lab.store.export import safe_filename
from lab.store.job_records import JobRecords
from lab.store.lessons import LessonBook
from lab.store.schema import (_SCHEMA, ACTIVE, BUSY_TIMEOUT_S, FINISHED, JOB_WORKER, METRIC_COLUMNS,
                              RUN_COLUMNS, EVENTS, STATUSES, _add_columns, _rename_tables, check_run_id, finite_or_null,
                              new_run_id)

default_db_path = settings.db_path


class OverCap(LabError):
    """Runs refused because their owner would have more than ``cap`` queued or running (``active`` already)."""

    def __init__(self, active: int, adding: int, cap: int) -> None:
        self.active, self.adding, self.cap = active, adding, cap
        super().__init__(f"you have {active} job(s) queued or running and at most {cap} are allowed at once; "
                         f"these {adding} would make {active + adding}: wait for some to finish, or stop some on the "
                         "Jobs page", where="jobs")


class RunStore:
    """The SQLite run store at ``path`` (default: env LAB_DB or ./data/runs.db); the class, its seats and the students'
    views are its :attr:`class_book` (:class:`lab.store.classroom.ClassBook`), the lessons' progress its :attr:`lessons`
    (:class:`lab.store.lessons.LessonBook`), both on the same connection."""

    def __init__(self, path: str | os.PathLike | None = None, data: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else default_db_path()
        self._data = Path(data) if data is not None else None  # checkpoints and logs; default from settings
        self._local = threading.local()
        self._init_lock = threading.Lock()
        self._ready = False
        self.class_book = ClassBook(self)
        self.lessons = LessonBook(self)
        self.job_records = JobRecords(self)

    # ----- connections -------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.row_factory = sqlite3.Row
        if not self._ready:
            with self._init_lock:
                for _ in range(50):
                    try:
                        conn.execute("PRAGMA journal_mode=WAL")
                        _rename_tables(conn)
                        conn.executescript(_SCHEMA)
                        _add_columns(conn)
                        break
                    except sqlite3.OperationalError as exc:  # another process is creating the file
                        if "locked" not in str(exc):
                            raise
                        time.sleep(0.1)
                self._ready = True
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _conn(self) -> sqlite3.Connection:
        """One connection per process and thread."""
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._connect()
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent

    # ----- runs --------------------------------------------------------------------------------
    def create_run(self, scenario: Any, name: str | None = None, status: str = "queued",
                   run_id: str | None = None, info: Mapping | None = None) -> str:
        """Store a new run of ``scenario`` (a Scenario or its dict); returns its id."""
        return self.create_runs([(scenario, name)], status=status, run_id=run_id, info=info)[0]

    def create_runs(self, items: Iterable[tuple], status: str = "queued", *,
                    run_id: str | None = None, info: Mapping | None = None, cap: int = 0) -> list[str]:
        """Store a new run of each (scenario, name) of ``items``, all or none; returns their ids. An item may add a
        third element, that run's own info, over ``info`` (every run's). With ``cap`` (> 0), refuse them with
        :class:`OverCap` when the owner in ``info`` would then have more than ``cap`` queued or running: counted and
        written in one transaction, so two submits at once cannot both pass."""
        shared = dict(info or {})
        rows = []
        for scenario, name, *own in items:
            sc = scenario.to_dict() if hasattr(scenario, "to_dict") else dict(scenario)
            rid = check_run_id(run_id) if run_id else new_run_id()
            rows.append((rid, str(name or sc.get("name") or rid)[:200], json.dumps(sc),
                         json.dumps({**shared, **dict(own[0] if own and own[0] else {})})))
        if status not in STATUSES:
            raise LabError(f"unknown status {status!r}; allowed: {list(STATUSES)}", where="run store")
        with self._write() as c:
            if cap > 0:
                owner = shared.get("owner")
                active = c.execute(f"SELECT COUNT(*) FROM runs WHERE json_extract(info, '$.owner') = ? AND status IN "
                                   f"({','.join('?' * len(ACTIVE))})", (str(owner), *ACTIVE)).fetchone()[0]
                if active + len(rows) > cap:
                    raise OverCap(active, len(rows), cap)
            for rid, name, sc, run_info in rows:
                if c.execute("SELECT 1 FROM runs WHERE id=?", (rid,)).fetchone():
                    raise LabError(f"a run with id {rid!r} already exists", where="run store")
                c.execute("INSERT INTO runs (id, name, scenario, status, created, info) VALUES (?,?,?,?,?,?)",
                          (rid, name, sc, status, time.time(), run_info))
        return [rid for rid, _, _, _ in rows]

    def update_run(self, run_id: str, **fields: Any) -> None:
        bad = set(fields) - set(RUN_COLUMNS[1:])
        if bad:
            raise LabError(f"unknown run field(s) {sorted(bad)}", where="run store")
        if "status" in fields and fields["status"] not in STATUSES:
            raise LabError(f"unknown status {fields['status']!r}; allowed: {list(STATUSES)}", where="run store")
        if "info" in fields and not isinstance(fields["info"], str):
            fields["info"] = json.dumps(fields["info"])
        if "scenario" in fields and not isinstance(fields["scenario"], str):
            fields["scenario"] = json.dumps(fields["scenario"])
        cols = ", ".join(f'"{k}"=?' for k in fields)
        with self._write() as c:
            c.execute(f"UPDATE runs SET {cols} WHERE id=?", (*fields.values(), run_id))

    def merge_info(self, run_id: str, extra: Mapping) -> None:
        with self._write() as c:
            row = c.execute("SELECT info FROM runs WHERE id=?", (run_id,)).fetchone()
            info = json.loads(row["info"] or "{}") if row else {}
            info.update(extra)
            c.execute("UPDATE runs SET info=? WHERE id=?", (json.dumps(info), run_id))

    def set_status(self, run_id: str, status: str, *, error: str | None = None,
                   only_from: Iterable[str] | None = None, end: bool | None = None) -> bool:
        """Set the status (and error); with ``only_from``, only when the current status is one of
        those (the first writer wins). Finished statuses also set the end time. Returns whether
        the row changed."""
        if status not in STATUSES:
            raise LabError(f"unknown status {status!r}; allowed: {list(STATUSES)}", where="run store")
        sets, args = ["status=?"], [status]
        if error is not None:
            sets.append("error=?")
            args.append(str(error)[:20_000])
        if end if end is not None else status in FINISHED:
            sets.append('"end"=?')
            args.append(time.time())
        if status == "running":
            sets.append("start=COALESCE(start, ?)")
            args.append(time.time())
        sql = f"UPDATE runs SET {', '.join(sets)} WHERE id=?"
        args.append(run_id)
        if only_from is not None:
            allowed = tuple(only_from)
            sql += f" AND status IN ({','.join('?' * len(allowed))})"
            args.extend(allowed)
        with self._write() as c:
            return c.execute(sql, args).rowcount > 0

    def get_run(self, run_id: str) -> dict:
        row = self._conn().execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise LabError(f"there is no run {run_id!r} in the store {self.path}", where="run store")
        d = dict(row)
        d["scenario"] = json.loads(d["scenario"])
        d["info"] = json.loads(d["info"] or "{}")
        return d

    def find_run(self, **info: Any) -> str | None:
        """The newest run whose info has every given key with the given value (e.g. the
        ``elastic_run_id`` torchrun gave it), or None."""
        sql = "SELECT id FROM runs"
        conds, args = [], []
        for k, v in info.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise LabError(f"bad info key {k!r}", where="run store")
            conds.append(f"json_extract(info, '$.{k}') = ?")
            args.append(v)
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        row = self._conn().execute(sql + " ORDER BY created DESC LIMIT 1", args).fetchone()
        return row["id"] if row else None

    def status(self, run_id: str) -> str:
        row = self._conn().execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise LabError(f"there is no run {run_id!r} in the store", where="run store")
        return row["status"]

    def list_runs(self, statuses: Iterable[str] | None = None, owner: str | None = None) -> pd.DataFrame:
        """Every run (newest first) with its settings' key fields and its owner (the browser session
        that submitted it; None for a command-line run); scenario JSON left out. ``owner``: only
        that session's runs."""
        import pandas as pd

        sql = ("SELECT id, name, status, created, start, \"end\", error, pid, scenario, "
               "json_extract(info, '$.owner') AS owner FROM runs")
        conds, args = [], []
        if statuses is not None:
            st = tuple(statuses)
            conds.append(f"status IN ({','.join('?' * len(st))})")
            args.extend(st)
        if owner is not None:
            conds.append("json_extract(info, '$.owner') = ?")
            args.append(str(owner))
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        sql += " ORDER BY created DESC, id DESC"
        rows = [dict(r) for r in self._conn().execute(sql, args).fetchall()]
        for r in rows:
            tr = json.loads(r.pop("scenario")).get("training", {})
            for k in ("optimizer", "sync", "model", "workers", "steps", "split", "emulate", "parallel", "strategy",
                      "balance"):
                r[k] = tr.get(k)
        cols = ["id", "name", "status", "created", "start", "end", "error", "pid",
                "optimizer", "sync", "model", "workers", "steps", "split", "emulate", "parallel", "strategy",
                "balance", "owner"]
        return pd.DataFrame(rows, columns=cols)

    def delete_run(self, run_id: str) -> None:
        """Remove a run, its measurements and its checkpoints."""
        check_run_id(run_id)
        with self._write() as c:
            c.execute("DELETE FROM metrics WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM job_events WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM heartbeats WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM launchers WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM plan_events WHERE run_id=?", (run_id,))
            c.execute("DELETE FROM runs WHERE id=?", (run_id,))
        shutil.rmtree(self.checkpoint_dir(run_id, create=False), ignore_errors=True)

    # ----- metrics -----------------------------------------------------------------------------
    def add_metrics(self, run_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert (or replace) metric rows: dicts with step, worker and any of METRIC_COLUMNS."""
        return self.add_metric_rows(run_id, ((r["step"], r["worker"], *(r.get(k) for k in METRIC_COLUMNS))
                                             for r in rows))

    def add_metric_rows(self, run_id: str, rows: Iterable[tuple]) -> int:
        """Fast path: tuples (step, worker, *METRIC_COLUMNS) in that order; NaN/inf become NULL."""
        cols = ("run_id", "step", "worker", *METRIC_COLUMNS)
        data = [(run_id, int(r[0]), int(r[1]), *(finite_or_null(v) for v in r[2:])) for r in rows]
        if not data:
            return 0
        with self._write() as c:
            c.executemany(f"INSERT OR REPLACE INTO metrics ({','.join(cols)}) VALUES "
                          f"({','.join('?' * len(cols))})", data)
        return len(data)

    def metrics(self, run_ids: str | Iterable[str], worker: int | None = None,
                since_step: int | None = None) -> pd.DataFrame:
        """Metric rows of one or several runs, ordered by run, step, worker."""
        import pandas as pd

        ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
        cols = ["run_id", "step", "worker", *METRIC_COLUMNS]
        if not ids:
            return pd.DataFrame(columns=cols)
        sql = f"SELECT {','.join(cols)} FROM metrics WHERE run_id IN ({','.join('?' * len(ids))})"
        args: list = list(ids)
        if worker is not None:
            sql += " AND worker=?"
            args.append(worker)
        if since_step is not None:
            sql += " AND step>=?"
            args.append(since_step)
        sql += " ORDER BY run_id, step, worker"
        rows = self._conn().execute(sql, args).fetchall()
        df = pd.DataFrame([tuple(r) for r in rows], columns=cols)
        for k in METRIC_COLUMNS:
            df[k] = pd.to_numeric(df[k], errors="coerce").astype(float)
        return df

    def progress(self, run_id: str) -> int:
        """The last step with a job-level row (0 when none yet)."""
        row = self._conn().execute("SELECT MAX(step) AS s FROM metrics WHERE run_id=? AND worker=?",
                                   (run_id, JOB_WORKER)).fetchone()
        return int(row["s"] or 0)

    def select(self, sql: str, args: Iterable[Any] = ()) -> list:
        """Rows of a read-only query on this store's connection (its WAL mode and busy timeout), for
        aggregates that SQLite computes over many metric rows so that only their result leaves it."""
        if not sql.lstrip().upper().startswith("SELECT"):
            raise LabError("only a SELECT reads the store this way", where="run store")
        return self._conn().execute(sql, list(args)).fetchall()

    def summary(self, run_ids: Iterable[str]) -> pd.DataFrame:
        """One row per run: settings, final and best test accuracy, wall time, bytes, the time split
        (mean over workers of each worker's total seconds), computed by SQLite over every metric row."""
        import pandas as pd

        split = ("t_compute", "t_comm", "t_compress", "t_idle", "t_emul_compute", "t_emul_comm")
        job = JOB_WORKER
        out = []
        for rid in run_ids:
            run = self.get_run(rid)
            tr = run["scenario"].get("training", {})
            (steps, best, wall, loss_step, acc_step, per_rows, workers, sent, recv, *totals) = self.select(f"""
                SELECT MAX(CASE WHEN worker={job} THEN step END),
                       MAX(CASE WHEN worker={job} THEN test_acc END),
                       MAX(CASE WHEN worker={job} THEN wall END),
                       MAX(CASE WHEN worker={job} AND loss IS NOT NULL THEN step END),
                       MAX(CASE WHEN worker={job} AND test_acc IS NOT NULL THEN step END),
                       COUNT(CASE WHEN worker<>{job} THEN 1 END),
                       COUNT(DISTINCT CASE WHEN worker<>{job} THEN worker END),
                       TOTAL(CASE WHEN worker<>{job} THEN bytes_sent END),
                       TOTAL(CASE WHEN worker<>{job} THEN bytes_recv END),
                       {", ".join(f"TOTAL(CASE WHEN worker<>{job} THEN {k} END)" for k in split)}
                FROM metrics WHERE run_id=?""", (rid,))[0]

            def at(step: int | None, column: str) -> float:
                if step is None:
                    return math.nan
                v = self.select(f"SELECT {column} FROM metrics WHERE run_id=? AND worker={job} AND step=?",
                                (rid, step))[0][0]
                return math.nan if v is None else float(v)

            row = {"id": rid, "name": run["name"], "status": run["status"], "optimizer": tr.get("optimizer"),
                   "sync": tr.get("sync"), "workers": tr.get("workers"), "emulate": tr.get("emulate"),
                   "steps": int(steps or 0), "final_loss": at(loss_step, "loss"),
                   "final_test_acc": at(acc_step, "test_acc"), "best_test_acc": math.nan if best is None else float(best),
                   "wall_s": math.nan if wall is None else float(wall),
                   "bytes_sent": float(sent), "bytes_recv": float(recv)}
            for k, total in zip(split, totals):
                row[k] = float(total) / workers if per_rows else math.nan
            out.append(row)
        return pd.DataFrame(out)

    def discard_after(self, run_id: str, step: int) -> int:
        """Delete the metric rows after ``step`` (a restart from the checkpoint at ``step`` redoes
        them); returns how many rows went. Rows up to ``step`` are never touched."""
        with self._write() as c:
            return c.execute("DELETE FROM metrics WHERE run_id=? AND step>?", (run_id, int(step))).rowcount

    # ----- lifecycle ---------------------------------------------------------------------------

    def data_dir(self) -> Path:
        return self._data if self._data is not None else settings.data_dir(self.folder)

    def checkpoint_dir(self, run_id: str, create: bool = True) -> Path:
        path = self.data_dir() / "checkpoints" / check_run_id(run_id)
        if create:
            path.mkdir(parents=True, exist_ok=True)
        return path


_DEFAULT: dict[str, RunStore] = {}


def run_store(path: str | os.PathLike | None = None) -> RunStore:
    """The RunStore for ``path`` (default: env LAB_DB or ./data/runs.db), one object per path."""
    p = str(Path(path) if path is not None else default_db_path())
    if p not in _DEFAULT:
        _DEFAULT[p] = RunStore(p)
    return _DEFAULT[p]


__all__ = ["RunStore", "run_store", "STATUSES", "ACTIVE", "FINISHED", "EVENTS", "METRIC_COLUMNS", "JOB_WORKER", "safe_filename",
           "new_run_id", "check_run_id", "default_db_path"]
