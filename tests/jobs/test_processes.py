"""lab.jobs.processes: a job's processes as the operating system sees them."""

import os
import signal
import subprocess
import sys
import time

from lab.jobs.policies import cpu_of
from lab.jobs.processes import alive, as_pid, end_group, rank_cpus, signal_name


def test_end_group_ends_a_group_that_ignores_sigterm():
    # A leader that ignores SIGTERM and a child of it: the grace period passes, SIGKILL ends both.
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            "print(c.pid, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())  # the handler is set and the child started
        assert alive(p.pid, must_contain="SIG_IGN") and alive(child, must_contain="time.sleep(60)")
        end_group(p.pid, lambda: p.poll() is not None)
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while alive(child, must_contain="time.sleep(60)") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child, must_contain="time.sleep(60)")  # the child went with the group
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        p.stdout.close()


def test_alive_needs_the_command_and_a_live_process():
    assert not alive(None) and not alive(0)
    assert not alive(os.getpid(), must_contain="no such command line anywhere")
    assert alive(os.getpid(), must_contain="python")


def test_small_conversions():
    assert as_pid("123") == 123 and as_pid(None) is None and as_pid("x") is None and as_pid(-4) is None
    assert signal_name(9) == "SIGKILL" and signal_name(999) == "999"


def test_ranks_take_the_groups_in_turn():
    held = {"cpu0": ["d"], "cpu1": ["d", "d"]}
    cpus = rank_cpus(held, 3)
    want = [c for c in (cpu_of("cpu0"), cpu_of("cpu1"), cpu_of("cpu1")) if c is not None]
    assert cpus == want
    assert rank_cpus(held, 1) == want[:1]
