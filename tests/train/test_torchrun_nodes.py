"""The torchrun path across machines, on this one: two torchrun agents as two nodes (--nnodes 2,
c10d rendezvous on 127.0.0.1), each with its own run store as two machines would have; both finish,
and the node that holds rank 0 stores the run."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.store.runs import RunStore
from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]


def test_a_job_across_two_nodes_finishes_on_both(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    port = free_port()
    procs = []
    try:
        for node in (0, 1):
            env = dict(os.environ, LAB_DB=str(tmp_path / f"node{node}" / "runs.db"),
                       LAB_DATA=str(tmp_path / f"node{node}"))
            (tmp_path / f"node{node}").mkdir()
            procs.append(subprocess.Popen(
                [torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"lab-{port}", "-m", "lab.train",
                 "--steps", "5"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
        outs = [p.communicate(timeout=240) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [o[1][-1500:] for o in outs]
        stores = [RunStore(tmp_path / f"node{n}" / "runs.db") for n in (0, 1)]
        runs = [s.list_runs() for s in stores]
        writer = [n for n in (0, 1) if len(runs[n])]
        assert len(writer) == 1, runs  # the node that got rank 0 stores the run; the other stores nothing
        s, r = stores[writer[0]], runs[writer[0]].iloc[0]
        assert r.status == "done" and r.workers == 2 and s.progress(r.id) == 5
        assert f"run {r.id} test_accuracy" in outs[writer[0]][0]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
