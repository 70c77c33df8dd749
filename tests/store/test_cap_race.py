"""The per-student cap is counted and written in one SQLite transaction: submits racing from several processes
(two tabs, two servers' workers on one file) never exceed it."""
from __future__ import annotations

import multiprocessing as mp

import pytest

from lab.scenario.document import default_scenario
from lab.store.runs import OverCap, RunStore


def _submit(db: str, owner: str, n: int, cap: int, go, out) -> None:
    store = RunStore(db)
    go.wait()
    try:
        out.put(len(store.create_runs([(default_scenario(), f"{owner}{i}") for i in range(n)],
                                      info={"owner": owner}, cap=cap)))
    except OverCap as exc:
        out.put(-exc.active - 1)


def test_a_batch_over_the_cap_is_refused_whole_and_says_the_counts(lab_db):
    store = RunStore(lab_db)
    store.create_runs([(default_scenario(), "a")] * 2, info={"owner": "A"}, cap=6)
    with pytest.raises(OverCap, match="you have 2 job\\(s\\) queued or running and at most 3") as exc:
        store.create_runs([(default_scenario(), "b")] * 2, info={"owner": "A"}, cap=3)
    assert (exc.value.active, exc.value.adding, exc.value.cap) == (2, 2, 3)
    assert len(store.list_runs(owner="A")) == 2
    store.create_runs([(default_scenario(), "c")] * 3, info={"owner": "B"}, cap=3)  # another owner's count
    for rid in store.list_runs(owner="A").id:
        store.set_status(rid, "done")
    assert len(store.create_runs([(default_scenario(), "d")] * 3, info={"owner": "A"}, cap=3)) == 3  # done ones leave


def test_four_processes_racing_six_runs_each_against_a_cap_of_six_store_six(lab_db, spawns):
    RunStore(lab_db)  # the schema, before the racers open the file
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_submit, args=(str(lab_db), "A", 6 if i < 2 else 1, 6, go, out)) for i in range(4)]
    try:
        for p in procs:
            p.start()
        go.set()
        got = [out.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    stored = RunStore(lab_db).list_runs(owner="A")
    assert len(stored) == sum(g for g in got if g > 0) <= 6
    assert sum(g > 0 for g in got) >= 1


def test_a_run_may_carry_its_own_info_over_the_batchs_in_the_same_transaction(lab_db):
    store = RunStore(lab_db)
    placed = {"devices": ["edge0", "edge1"], "messages": [[0, 1, 6]]}
    a, b = store.create_runs([(default_scenario(), "a", {"placed": placed}), (default_scenario(), "b")],
                             info={"owner": "A", "queued_by": "here"}, cap=3)
    assert store.get_run(a)["info"] == {"owner": "A", "queued_by": "here", "placed": placed}
    assert store.get_run(b)["info"] == {"owner": "A", "queued_by": "here"}
    with pytest.raises(OverCap):  # a refused batch writes none of its runs' own info either
        store.create_runs([(default_scenario(), "c", {"placed": placed})] * 2, info={"owner": "A"}, cap=3)
    assert len(store.list_runs(owner="A")) == 2
