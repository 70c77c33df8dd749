"""The services every rank holds, whichever trainer it runs: rank 0's store writer keeps the order of its writes
and loses no failure, and a restarted attempt's record goes to a real run store, from rank 0 only."""
from __future__ import annotations

import threading

import pytest

from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.train.placement_run import PlacementTrainer
from lab.train.services import RankServices
from lab.train.trainer import Trainer


def test_writes_run_in_order_on_one_thread_and_a_failure_is_raised_at_the_next_call():
    s = RankServices(None, None, 0, launched=False)
    seen, threads = [], set()

    def put(k):
        threads.add(threading.current_thread().name)
        seen.append(k)

    for k in range(20):
        s.write(put, k)
    s.commit()
    assert seen == list(range(20))
    assert len(threads) == 1 and threading.current_thread().name not in threads

    def broken():
        raise OSError("disk full")

    s.write(broken)
    s.write(put, 20)  # queued behind the failure, still done
    with pytest.raises(OSError, match="disk full"):
        s.drain()
    assert seen[-1] == 20


def test_a_failed_write_reaches_the_rank_at_a_later_write():
    s = RankServices(None, None, 0, launched=False)
    s.write(lambda: 1 / 0)
    s._pending[0].exception()  # waits until the failed write is done
    with pytest.raises(ZeroDivisionError):
        s.write(lambda: None)


def test_a_restart_discards_later_rows_and_is_an_event_of_rank_0_only(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs.db")
    rid = store.create_run(default_scenario(), status="running")
    store.add_metrics(rid, [{"step": s, "worker": 0, "loss": 1.0 / s} for s in range(1, 7)])
    monkeypatch.setenv("LAB_ATTEMPT", "1")
    RankServices(rid, store, 1, launched=True).restarted(3, {"world": 2})
    assert len(store.metrics(rid)) == 6 and store.job_records.last_event(rid, "restart") is None
    RankServices(rid, store, 0, launched=True).restarted(3, {"world": 2})
    assert sorted(store.metrics(rid)["step"]) == [1, 2, 3]
    ev = store.job_records.last_event(rid, "restart")
    assert ev["attempt"] == 1 and ev["step"] == 3
    assert ev["detail"] == {"world": 2, "discarded_rows": 3, "launcher": "lab"}


def test_both_trainers_hold_the_services_instead_of_inheriting_each_other():
    assert not issubclass(PlacementTrainer, Trainer)
    for cls in (PlacementTrainer, Trainer):
        t = cls(default_scenario(), 0, 1, None, None, launched=False)
        assert isinstance(t.services, RankServices)
        assert not hasattr(t, "log") and not hasattr(t, "fault")  # one way: through the services
