"""The run store's schema: its tables, the names it accepts, and the columns added to an older file when it is
opened."""

from __future__ import annotations

import math
import re
import secrets
import sqlite3
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from lab.errors import LabError

STATUSES = ("queued", "running", "done", "failed", "diverged", "stopped", "interrupted")
ACTIVE = ("queued", "running")
FINISHED = ("done", "failed", "diverged", "stopped", "interrupted")
#: Lifecycle events, in the order a job normally meets them; fault, alarm, restart
#: and stop happen only when something goes wrong or a user intervenes.
EVENTS = ("submitted", "requeued", "parsed", "scheduled", "waiting", "started", "data", "running", "yielded", "fault", "alarm", "restart",
          "stop", "ended", "released")
METRIC_COLUMNS = ("loss", "test_acc", "bytes_sent", "bytes_recv", "t_compute", "t_comm", "t_compress",
                  "t_idle", "t_emul_compute", "t_emul_comm", "samples_per_s", "wall")
LAUNCHER_FIELDS = ("pid", "pgid", "created", "host", "boot", "scratch")
# Columns added after a store was first written: added to an older file when it is opened.
_ADDED_COLUMNS = {"launchers": {"pgid": "INTEGER", "created": "REAL"}, "plan_events": {"called": "REAL", "from_piece": "INTEGER", "output": "INTEGER"},
                  "classroom": {"handed": "REAL"}, "seats": {"opened": "REAL"}}
RUN_COLUMNS = ("id", "name", "scenario", "status", "created", "start", "end", "error", "pid", "info")
PLAN_EVENT_COLUMNS = ("device", "kind", "op", "piece", "micro", "start", "end", "src", "dst", "bytes", "wait",
                      "called", "from_piece", "output")
JOB_WORKER = -1  # the "worker" value of job-level metric rows
BUSY_TIMEOUT_S = 30.0
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    scenario TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    start REAL,
    "end" REAL,
    error TEXT,
    pid INTEGER,
    info TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    worker INTEGER NOT NULL,
    loss REAL, test_acc REAL, bytes_sent REAL, bytes_recv REAL,
    t_compute REAL, t_comm REAL, t_compress REAL, t_idle REAL, t_emul_compute REAL, t_emul_comm REAL,
    samples_per_s REAL, wall REAL,
    PRIMARY KEY (run_id, step, worker)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    t REAL NOT NULL,
    event TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    step INTEGER,
    worker INTEGER,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS job_events_by_run ON job_events (run_id, seq);
CREATE TABLE IF NOT EXISTS heartbeats (
    run_id TEXT NOT NULL,
    worker INTEGER NOT NULL,
    attempt INTEGER,
    pid INTEGER,
    step INTEGER,
    phase TEXT,
    t REAL,
    progress_t REAL,
    PRIMARY KEY (run_id, worker)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS plan_events (
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    device TEXT, kind TEXT, op TEXT, piece INTEGER, micro INTEGER,
    start REAL, "end" REAL, src TEXT, dst TEXT, bytes REAL, wait REAL, called REAL, from_piece INTEGER,
    output INTEGER
);
CREATE INDEX IF NOT EXISTS plan_events_by_run ON plan_events (run_id, step);
CREATE TABLE IF NOT EXISTS launchers (
    run_id TEXT PRIMARY KEY,
    pid INTEGER,
    host TEXT,
    boot TEXT,
    scratch TEXT,
    pgid INTEGER,
    created REAL,
    started REAL,
    beat REAL
);
CREATE TABLE IF NOT EXISTS lesson_progress (
    owner TEXT NOT NULL,
    lesson TEXT NOT NULL,
    step INTEGER NOT NULL,
    ticked INTEGER NOT NULL DEFAULT 0,
    tries INTEGER NOT NULL DEFAULT 0,
    correct INTEGER NOT NULL DEFAULT 0,
    t REAL NOT NULL,
    PRIMARY KEY (owner, lesson, step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS classroom (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    code TEXT NOT NULL,
    lesson TEXT,
    opened REAL NOT NULL,
    handed REAL
);
CREATE TABLE IF NOT EXISTS seats (
    owner TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    joined REAL NOT NULL,
    opened REAL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS removed (
    owner TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    removed REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS student_views (
    owner TEXT NOT NULL,
    page TEXT NOT NULL,
    view TEXT NOT NULL,
    t REAL NOT NULL,
    PRIMARY KEY (owner, page)
) WITHOUT ROWID;
"""


def _rename_tables(conn: sqlite3.Connection) -> None:
    """An older store's job lifecycle table was called ``stages`` with a ``stage`` column (a name the pipeline's
    stages also had): renamed in place, its rows kept, before the schema is applied."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "stages" in tables and "job_events" not in tables:
        try:
            conn.executescript("BEGIN IMMEDIATE; ALTER TABLE stages RENAME TO job_events; "
                               "ALTER TABLE job_events RENAME COLUMN stage TO event; "
                               "DROP INDEX IF EXISTS stages_by_run; COMMIT;")
        except sqlite3.OperationalError as exc:  # another process renamed it a moment ago
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if "no such table" not in str(exc) and "already" not in str(exc):
                raise


def _add_columns(conn: sqlite3.Connection) -> None:
    """Add to an older store's tables the columns it was written without (its rows keep NULL there)."""
    for table, cols in _ADDED_COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for name, kind in cols.items():
            if name not in have:
                try:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as exc:  # another process added it a moment ago
                    if "duplicate column" not in str(exc):
                        raise


def new_run_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise LabError(f"{run_id!r} is not a valid run id: use 1-64 letters, digits, '.', '_' or '-', "
                       "starting with a letter or digit", where="run id")
    return run_id


def finite_or_null(v: Any) -> Any:
    """NaN and infinities are stored as NULL, so JSON and SQL stay plain."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
