"""The job manager's parts, each alone: the fair queue, the running jobs, a launcher handle, the drains, the sweeper
and the access policy own their state and are checked here without starting a job."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from lab.errors import LabError
from lab.jobs.actions import Access
from lab.jobs.launch import Launched, Starting
from lab.jobs.lifecycle import Drains, Sweeper, mark_gone
from lab.jobs.queue import FairQueue
from lab.jobs.running import RunningJobs
from lab.jobs.slots import SlotBook, local_groups
from lab.store.runs import RunStore
from lab.scenario.document import default_scenario


def round_robin(items: list[tuple[str, str]], ring: list[str], after: str | None) -> list[tuple[str, str]]:
    """Brute force: the students take turns in ring order starting after ``after``; each turn takes the
    student's oldest job still queued."""
    left = list(items)
    turn = ring[(ring.index(after) + 1) % len(ring):] + ring[:(ring.index(after) + 1) % len(ring)] if after else ring
    out = []
    while left:
        for o in turn:
            mine = [q for q in left if q[1] == o]
            if mine:
                out.append(mine[0])
                left.remove(mine[0])
    return out


def test_the_queue_takes_turns_over_students_as_brute_force_does_and_forgets_what_leaves():
    for pattern in itertools.islice(itertools.product("abc", repeat=6), 0, None, 37):
        q = FairQueue()
        for i, owner in enumerate(pattern):
            q.add(f"r{i}", owner, tasks=i % 3 + 1)
        assert q.order() == round_robin(q.items, q.ring, None)
        first, owner = q.order()[0]
        q.take(first, owner)
        assert first not in q and first not in q.tasks and q.last_owner == owner
        assert q.order() == round_robin(q.items, q.ring, owner)  # the next turn is the next student's
    q = FairQueue()
    q.add("x", "a", tasks=2)
    assert q.owner("x") == "a" and len(q) == 1 and q.remove("x") and not q.remove("x") and q.tasks == {}


def test_running_jobs_report_overtime_once_yield_only_for_a_waiting_student_and_forget_everything(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    jobs = RunningJobs()
    a, b = (store.create_run(default_scenario(), status="running") for _ in range(2))
    jobs.begin(a, "ann", Launched(a, store))
    jobs.begin(b, "bob", Launched(b, store))
    jobs.since = {a: 100.0, b: 150.0}
    assert jobs.overtime(lambda s: s > 60, 200.0) == [a] and jobs.overtime(lambda s: s > 60, 200.0) == []
    jobs.yield_long(store, {"ann", "bob"}, 200.0, slice_s=10.0)  # both students already run a job: nobody yields
    assert jobs.yielded == set()
    jobs.yield_long(store, {"cat"}, 200.0, slice_s=10.0)  # cat waits; still starting (no pid): nothing to renice
    assert jobs.yielded == set() and jobs.fresh() == [a, b]
    seen = jobs.seen_by("bob", 200.0)
    assert [(s["run_id"], s["yours"]) for s in seen] == [(a, False), (b, True)] and seen[1]["elapsed"] == 50.0
    jobs.forget(b)
    assert jobs.ids() == [a] and b not in jobs.owners and b not in jobs.since and jobs.students() == {"ann"}


def test_a_launched_handle_follows_its_process_and_closes_its_log_once(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    starting = Launched("r", store)
    assert isinstance(starting.process, Starting) and starting.pid is None and not starting.gone()
    starting.end()  # nothing to end yet: its claim of the run finds it stopped
    log = open(tmp_path / "r.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    handle = Launched("r", store, p, log)
    p.wait(timeout=60)
    assert handle.gone() and handle.returncode == 3 and handle.pid == p.pid
    handle.close()
    handle.close()
    assert log.closed and handle.log_file is None
    assert handle.processes() == [] and handle.scratch() is None  # no launcher claimed the run


def test_drains_free_the_slots_once_no_process_of_the_job_is_left(tmp_path):
    import threading

    store = RunStore(tmp_path / "runs.db")
    book = SlotBook(local_groups())
    rid = store.create_run(default_scenario(), status="running")
    group = next(iter(book.free()))
    held = book.take(rid, {group: 1})
    drains = Drains(store, book, threading.RLock())
    assert mark_gone(store, rid, "its launcher was killed", "a test") and not mark_gone(store, rid, "again", "a test")
    drains.begin(rid, by="a test")
    assert rid not in drains and drains.ids() == [] and book.held == {}  # no process left: released at once
    ev = store.job_records.events(rid)
    released = ev[ev.event == "released"].detail.iloc[-1]
    assert released["slots"] == held and released["by"] == "a test"
    assert store.status(rid) == "interrupted"


def test_the_sweeper_sweeps_at_most_once_an_interval_and_knows_no_orphan_of_a_fresh_store(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    sweeper = Sweeper(store)
    assert sweeper.due(60.0) and not sweeper.due(60.0) and sweeper.due(0.0)
    assert sweeper.at_start(set()) == ([], []) and sweeper.orphans() == [] and sweeper.adopted == []
    rid = store.create_run(default_scenario(), status="running")
    store.update_run(rid, pid=os.getpid())  # a run whose process is this test, which runs no training code
    adopted, gone = Sweeper(store).at_start(set())
    assert adopted == [] and [r for r, _ in gone] == [rid]
    assert Sweeper(store).at_start({rid}) == ([], [])  # the manager's own run is not another's


def test_access_refuses_another_students_run_and_the_limits_to_anyone_but_the_teacher(tmp_path, monkeypatch):
    from lab.jobs.limits import Limits

    monkeypatch.setenv("LAB_TEACHER_TOKEN", "Zq3-uV8_kP1wYt6Rb0sLm4-parts")
    store = RunStore(tmp_path / "runs.db")
    rid = store.create_run(default_scenario(), status="done", info={"owner": "ann"})
    access = Access(store, lambda r: store.get_run(r)["info"].get("owner"))
    assert access.check(rid, "ann", False, "stop")["id"] == rid and access.actor("ann", False) == "ann"
    with pytest.raises(LabError):
        access.check(rid, "bob", False, "stop")
    with pytest.raises(LabError):
        access.set_limits("bob", Limits(10, 1.0, 1))
    assert access.sign_in_teacher("teach", "Zq3-uV8_kP1wYt6Rb0sLm4-parts")
    assert access.check(rid, "teach", False, "stop") and access.actor("teach", False) == "teacher"
    assert access.set_limits("teach", Limits(10, 1.0, 1)).max_steps == 10 and access.limits.max_steps == 10
