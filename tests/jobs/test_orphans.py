"""A manager that starts beside runs a dead manager left running counts them against its capacity until they end,
and every queued run still runs."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from lab.jobs.manager import JobManager
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore

pytestmark = pytest.mark.usefixtures("spawns")


@pytest.fixture
def orphan_process():
    """A process whose command line names lab.train, as a surviving launcher's does."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "lab.train"])
    time.sleep(0.2)
    yield p
    p.kill()
    p.wait(timeout=10)


def test_orphans_hold_the_capacity_until_they_end_then_the_queue_runs(lab_db, orphan_process):
    store = RunStore(lab_db)
    orphans = [store.create_run(default_scenario(), name=f"orphan{i}", status="running", info={"owner": "A"})
               for i in range(2)]
    for rid in orphans:
        store.update_run(rid, pid=orphan_process.pid)
    dead = {"pid": 2**22 + 12345, "created": 1.0, "boot": "a-boot-long-gone"}
    queued = [store.create_run(default_scenario(), name=f"q{i}", status="queued",
                               info={"owner": o, "queued_by": dead}) for i, o in enumerate("AB")]
    jm = JobManager(lab_db, capacity=1, warm=False)
    started = []
    jm._start = lambda spec: started.append(spec)  # the decision is under test, not a launch
    try:
        assert jm.mark_interrupted() == [] and jm.sweeper.adopted == queued
        assert jm.sweeper.orphans() == sorted(orphans)
        jm._schedule()
        assert started == []  # two orphans run: a capacity of one is full
        store.set_status(orphans[0], "done")
        jm._schedule()
        assert jm.sweeper.orphans() == [orphans[1]] and started == []
        store.set_status(orphans[1], "interrupted")
        jm._schedule()
        assert jm.sweeper.orphans() == [] and len(started) == 1  # one at a time: the capacity
        assert started[0].run_id == queued[0]
    finally:
        jm._closed = True
