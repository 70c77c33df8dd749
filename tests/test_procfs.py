"""lab.procfs: this machine's processes read from /proc, checked against what the kernel and
subprocess report for processes the test starts itself."""

import os
import signal
import subprocess
import sys
import time

from lab import procfs


def _sleeper(tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", tag])


def test_state_start_and_command_line_of_a_live_child():
    p = _sleeper("procfs-live-marker")
    try:
        assert procfs.state(p.pid) in ("R", "S", "D")
        assert procfs.running(p.pid)
        assert "procfs-live-marker" in procfs.command_line(p.pid)
        start = procfs.start_ticks(p.pid)
        mine = procfs.start_ticks(os.getpid())
        assert start is not None and mine is not None and start >= mine  # started after this process
        assert procfs.pids_whose_command_has("procfs-live-marker") == [p.pid]
        assert procfs.pids_whose_command_has("procfs-live-marker", exclude=(p.pid,)) == []
    finally:
        p.kill()
        p.wait()


def test_a_zombie_is_not_running_and_a_reaped_child_is_gone():
    p = _sleeper("procfs-zombie-marker")
    os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while procfs.state(p.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert procfs.state(p.pid) == "Z"  # killed, not yet reaped
    assert not procfs.running(p.pid)
    assert procfs.pids_whose_command_has("procfs-zombie-marker") == []
    p.wait()
    assert procfs.state(p.pid) is None and procfs.start_ticks(p.pid) is None
    assert procfs.command_line(p.pid) is None and procfs.rss_mb(p.pid) == 0.0


def test_kill_and_reap_ends_and_reaps_every_child():
    kids = [_sleeper("procfs-reap-marker") for _ in range(3)]
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    procfs.kill_and_reap([*kids, done], grace_s=30)
    assert [k.returncode for k in kids] == [-signal.SIGKILL] * 3 and done.returncode == 0
    assert procfs.pids_whose_command_has("procfs-reap-marker") == []


def test_log_tails(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)))
    assert procfs.last_lines(log, 2) == ["line 8", "line 9"]
    assert procfs.last_lines(tmp_path / "missing.log", 2) == []
    assert procfs.tail_text(log, 7) == "line 9\n"[-7:]
    assert procfs.tail_text(tmp_path / "missing.log") == ""


def test_memory_and_boot():
    assert procfs.rss_mb() > 1.0
    boot = procfs.boot_id()
    assert boot == "" or len(boot) == 36  # a UUID where the kernel has one


def test_kill_pids_signals_the_live_ones_and_skips_the_gone():
    p = _sleeper("procfs-killpids-marker")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert procfs.kill_pids([p.pid, gone.pid]) == [p.pid]
    assert p.wait(timeout=30) == -signal.SIGKILL


def test_a_command_line_read_right_after_exec_is_read_again(monkeypatch):
    # Right after exec a process's /proc/<pid>/cmdline reads empty for a moment (seen under load for
    # a child that had just been started): a live process's command line is read again.
    reads = iter(["", "", "python -m lab.train --run-id x"])
    monkeypatch.setattr(procfs, "_read_command_line", lambda pid: next(reads))
    monkeypatch.setattr(procfs, "running", lambda pid: True)
    assert procfs.command_line(12345) == "python -m lab.train --run-id x"
    # without the wait, or for a process that stays empty (a kernel thread, or one on its way out), ""
    monkeypatch.setattr(procfs, "_read_command_line", lambda pid: "")
    assert procfs.command_line(12345, wait_s=0.0) == ""
    assert procfs.command_line(12345, wait_s=0.05) == ""
    # a process that dies meanwhile ends the wait
    monkeypatch.setattr(procfs, "running", lambda pid: False)
    assert procfs.command_line(12345) == ""
