"""What the run store keeps of a job's life beside its metrics: its lifecycle events, its workers' latest
heartbeats, who runs it (its launcher) and a placement run's recorded steps."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    import pandas as pd

from lab.errors import LabError

from lab.store.schema import EVENTS, LAUNCHER_FIELDS, PLAN_EVENT_COLUMNS, check_run_id, finite_or_null


class JobRecords:
    """The lifecycle, heartbeats, launcher and recorded steps of a run: the run store's ``job_events``,
    ``heartbeats``, ``launchers`` and ``plan_events``, on its connection (``db``: the
    :class:`lab.store.runs.RunStore` it belongs to)."""

    def __init__(self, db):
        self._conn, self._write = db._conn, db._write

    def add_event(self, run_id: str, event: str, *, attempt: int = 0, step: int | None = None,
                  worker: int | None = None, detail: Mapping | None = None, t: float | None = None) -> None:
        """Record one lifecycle event of a run (see :data:`EVENTS`)."""
        if event not in EVENTS:
            raise LabError(f"unknown job event {event!r}; allowed: {list(EVENTS)}", where="run store")
        with self._write() as c:
            c.execute("INSERT INTO job_events (run_id, t, event, attempt, step, worker, detail) VALUES (?,?,?,?,?,?,?)",
                      (run_id, time.time() if t is None else float(t), event, int(attempt),
                       None if step is None else int(step), None if worker is None else int(worker),
                       json.dumps(dict(detail or {}), default=str)))

    def events(self, run_ids: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Lifecycle events (of the given runs, or all), oldest first; ``detail`` as a dict."""
        import pandas as pd

        cols = ["seq", "run_id", "t", "event", "attempt", "step", "worker", "detail"]
        sql = f"SELECT {','.join(cols)} FROM job_events"
        args: list = []
        if run_ids is not None:
            ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
            if not ids:
                return pd.DataFrame(columns=cols)
            sql += f" WHERE run_id IN ({','.join('?' * len(ids))})"
            args = ids
        rows = [dict(r) for r in self._conn().execute(sql + " ORDER BY seq", args).fetchall()]
        for r in rows:
            r["detail"] = json.loads(r["detail"] or "{}")
        return pd.DataFrame(rows, columns=cols)

    def last_event(self, run_id: str, event: str | None = None) -> dict | None:
        sql, args = "SELECT * FROM job_events WHERE run_id=?", [run_id]
        if event is not None:
            sql += " AND event=?"
            args.append(event)
        row = self._conn().execute(sql + " ORDER BY seq DESC LIMIT 1", args).fetchone()
        if row is None:
            return None
        d = dict(row)
        d["detail"] = json.loads(d["detail"] or "{}")
        return d

    def set_heartbeats(self, run_id: str, beats: Iterable[Mapping[str, Any]]) -> None:
        """Replace the run's latest heartbeat per worker (dicts: worker, attempt, pid, step, phase,
        t, progress_t)."""
        cols = ("worker", "attempt", "pid", "step", "phase", "t", "progress_t")
        data = [(run_id, *(b.get(k) for k in cols)) for b in beats]
        with self._write() as c:
            c.execute("DELETE FROM heartbeats WHERE run_id=?", (run_id,))
            if data:
                c.executemany(f"INSERT INTO heartbeats (run_id, {','.join(cols)}) VALUES "
                              f"({','.join('?' * (len(cols) + 1))})", data)

    def heartbeats(self, run_id: str) -> pd.DataFrame:
        import pandas as pd

        cols = ["worker", "attempt", "pid", "step", "phase", "t", "progress_t"]
        rows = self._conn().execute(f"SELECT {','.join(cols)} FROM heartbeats WHERE run_id=? ORDER BY worker",
                                    (run_id,)).fetchall()
        return pd.DataFrame([tuple(r) for r in rows], columns=cols)

    def claim(self, run_id: str, **launcher: Any) -> bool:
        """A launcher takes a queued run, in one transaction: the run becomes running with the
        launcher's pid, and the launcher's record (see :meth:`set_launcher`) is written. False, and
        nothing written, when the run is not queued (stopped meanwhile, or another launcher has it):
        a job never runs twice."""
        self._check_launcher_fields(launcher)
        now = time.time()
        with self._write() as c:
            if c.execute("UPDATE runs SET status='running', start=COALESCE(start, ?), pid=? "
                         "WHERE id=? AND status='queued'", (now, launcher.get("pid"), run_id)).rowcount != 1:
                return False
            c.execute("DELETE FROM launchers WHERE run_id=?", (run_id,))
            cols = ["run_id", "started", "beat", *launcher]
            c.execute(f"INSERT INTO launchers ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                      (run_id, now, now, *launcher.values()))
        return True

    @staticmethod
    def _check_launcher_fields(fields: dict) -> None:
        bad = set(fields) - set(LAUNCHER_FIELDS)
        if bad:
            raise LabError(f"unknown launcher field(s) {sorted(bad)}", where="run store")

    def set_launcher(self, run_id: str, **fields: Any) -> None:
        """Record (or update) who runs the job: pid, pgid, created, host, boot, scratch; a new record
        also gets ``started`` and a first ``beat``."""
        self._check_launcher_fields(fields)
        now = time.time()
        with self._write() as c:
            if c.execute("SELECT 1 FROM launchers WHERE run_id=?", (run_id,)).fetchone() is None:
                c.execute("INSERT INTO launchers (run_id, started, beat) VALUES (?,?,?)", (run_id, now, now))
            if fields:
                c.execute(f"UPDATE launchers SET {', '.join(f'{k}=?' for k in fields)} WHERE run_id=?",
                          (*fields.values(), run_id))

    def beat_launcher(self, run_id: str, t: float | None = None) -> None:
        """The launcher is alive at ``t`` (default now)."""
        with self._write() as c:
            c.execute("UPDATE launchers SET beat=? WHERE run_id=?", (time.time() if t is None else float(t), run_id))

    def launcher(self, run_id: str) -> dict | None:
        """The launcher record of a run (see the ``launchers`` table), or None."""
        row = self._conn().execute("SELECT * FROM launchers WHERE run_id=?", (run_id,)).fetchone()
        return dict(row) if row else None

    # ----- lessons -----------------------------------------------------------------------------

    # ----- a placement run's timeline ----------------------------------------------------------
    def add_plan_events(self, run_id: str, step: int, rows: Iterable[Mapping[str, Any]]) -> int:
        """A placement run's recorded step: one row per operator, backward pass, optimiser step, emulated
        wait and transfer (:data:`PLAN_EVENT_COLUMNS`), on the run's one clock (seconds from the step's start)."""
        data = [(run_id, int(step), int(r.get("rank", -1)), *(finite_or_null(r.get(k)) if k in ("start", "end", "bytes", "wait", "called")
                                                              else r.get(k) for k in PLAN_EVENT_COLUMNS))
                for r in rows]
        with self._write() as c:
            # by name: a store written by a newer version may hold columns this one does not know
            names = ", ".join(f'"{k}"' for k in ("run_id", "step", "rank", *PLAN_EVENT_COLUMNS))
            c.executemany(f"INSERT INTO plan_events ({names}) VALUES ({','.join('?' * (3 + len(PLAN_EVENT_COLUMNS)))})",
                          data)
        return len(data)

    def plan_events(self, run_id: str, step: int | None = None) -> pd.DataFrame:
        """The recorded steps of a placement run (all, or one ``step``), in time order."""
        import pandas as pd

        check_run_id(run_id)
        sql = "SELECT step, rank, " + ", ".join(f'"{k}"' for k in PLAN_EVENT_COLUMNS) + \
              " FROM plan_events WHERE run_id=?" + (" AND step=?" if step is not None else "") + " ORDER BY step, start"
        rows = self._conn().execute(sql, (run_id,) if step is None else (run_id, int(step))).fetchall()
        return pd.DataFrame([tuple(r) for r in rows], columns=["step", "rank", *PLAN_EVENT_COLUMNS])
