"""lab.processes: this machine's processes through psutil, checked against what the kernel and
subprocess report for processes the test starts itself, and against /proc where it says the same."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import processes
from lab.jobs.slots import cpu_of, rank_cpus


def _sleeper(*, new_session: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=new_session)


def _stat_start_s(pid: int) -> float:
    """The process's start from /proc (field 22, clock ticks since boot), in Unix seconds."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime"))
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def test_identity_of_a_live_child_and_its_creation_time_against_proc(spawns):
    p = _sleeper(new_session=True)
    try:
        who = processes.identity(p.pid)
        assert who["pid"] == p.pid and who["pgid"] == p.pid  # a new session: it leads its group
        assert abs(who["created"] - _stat_start_s(p.pid)) < 0.05
        assert who["created"] >= processes.created(os.getpid())  # started after this process
        assert processes.running(p.pid) and processes.still_runs(who)
        # the same pid with another creation time is another process (a reused pid); another boot too
        assert not processes.still_runs({**who, "created": who["created"] + 1})
        assert not processes.still_runs({**who, "boot": "1"})
    finally:
        p.kill()
        p.wait()


def test_a_zombie_is_not_running_and_a_reaped_child_is_gone(spawns):
    p = _sleeper()
    who = processes.identity(p.pid)
    os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not processes.running(p.pid) and not processes.still_runs(who)  # killed, not yet reaped
    p.wait()
    assert processes.created(p.pid) is None and processes.rss_mb(p.pid) == 0.0
    assert not processes.running(p.pid) and not processes.running(None)


def test_group_members_are_the_groups_live_processes_created_in_the_span(spawns):
    leader = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
                               "'import time; time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)"],
                              start_new_session=True, stdout=subprocess.PIPE, text=True)
    other = _sleeper(new_session=True)
    try:
        child = int(leader.stdout.readline())
        since = processes.created(leader.pid)
        assert processes.group_members(leader.pid, since=since) == sorted([leader.pid, child])
        assert processes.group_members(leader.pid, since=since, exclude=(child,)) == [leader.pid]
        # a group id handed out again later names none of the processes created before it
        assert processes.group_members(leader.pid, since=since + 3600) == []
        assert processes.group_members(leader.pid, since=since, until=since - 3600) == []
        assert other.pid not in processes.group_members(leader.pid)
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while child in processes.group_members(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert processes.group_members(leader.pid) == [leader.pid]  # a zombie is no member
    finally:
        for p in (leader, other):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        leader.stdout.close()


def test_end_group_ends_a_group_that_ignores_sigterm(spawns):
    # A leader that ignores SIGTERM and a child of it: the grace period passes, SIGKILL ends both.
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            "print(c.pid, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())  # the handler is set and the child started
        assert processes.running(p.pid) and processes.running(child)
        processes.end_group(p.pid, lambda: p.poll() is not None)
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while processes.running(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not processes.running(child)  # the child went with the group
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        p.stdout.close()


def test_end_group_without_the_group_signals_the_one_process(spawns):
    p = _sleeper()  # in this test's group: only it may be signalled
    processes.end_group(p.pid, lambda: p.poll() is not None, whole_group=False)
    assert p.wait(timeout=30) == -signal.SIGTERM
    processes.end_group(None, lambda: True)  # nothing to end


def test_kill_and_reap_ends_and_reaps_every_child(spawns):
    kids = [_sleeper() for _ in range(3)]
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    processes.kill_and_reap([*kids, done], grace_s=30)
    assert [k.returncode for k in kids] == [-signal.SIGKILL] * 3 and done.returncode == 0
    assert not any(processes.running(k.pid) for k in kids)


def test_kill_pids_signals_the_live_ones_and_skips_the_gone(spawns):
    p = _sleeper()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert processes.kill_pids([p.pid, gone.pid]) == [p.pid]
    assert p.wait(timeout=30) == -signal.SIGKILL


def test_log_tails(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)))
    assert processes.last_lines(log, 2) == ["line 8", "line 9"]
    assert processes.last_lines(tmp_path / "missing.log", 2) == []
    assert processes.tail_text(log, 7) == "line 9\n"[-7:]
    assert processes.tail_text(tmp_path / "missing.log") == ""


def test_memory_boot_and_small_conversions():
    status = Path("/proc/self/status").read_text()
    vm_rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024
    assert abs(processes.rss_mb() - vm_rss) < max(5.0, 0.1 * vm_rss)
    assert processes.boot_id() and processes.boot_id() == processes.identity()["boot"]
    assert processes.as_pid("123") == 123 and processes.as_pid(None) is None and processes.as_pid("x") is None
    assert processes.as_pid(-4) is None
    assert processes.signal_name(9) == "SIGKILL" and processes.signal_name(999) == "999"


def test_ranks_take_the_groups_in_turn():
    held = {"cpu0": ["d"], "cpu1": ["d", "d"]}
    cpus = rank_cpus(held, 3)
    want = [c for c in (cpu_of("cpu0"), cpu_of("cpu1"), cpu_of("cpu1")) if c is not None]
    assert cpus == want
    assert rank_cpus(held, 1) == want[:1]


def test_descendants_are_a_live_processes_children_created_since_a_time(spawns):
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
                               "'import time; time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        who = processes.identity(parent.pid)
        assert processes.descendants(who) == [child]
        assert processes.descendants(who, since=processes.created(child) + 3600) == []  # none that young
        assert processes.descendants({**who, "created": who["created"] + 1}) == []  # another process's pid
    finally:
        os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
        parent.stdout.close()


_SPIN = "import time\nwhile time.process_time() < {s}: pass\n"  # a fixed amount of CPU time, however busy the cores


def _cpu_of_exited(p: subprocess.Popen) -> float:
    """The CPU seconds of child ``p`` once it has exited, read before it is reaped (a zombie keeps its times)."""
    proc = processes.psutil.Process(p.pid)
    while proc.status() != processes.psutil.STATUS_ZOMBIE:
        time.sleep(0.02)
    t = proc.cpu_times()
    return t.user + t.system


def test_the_load_meter_counts_another_process_cpu_as_other_work(spawns):
    # A process this one had before the count began is not the job's (a warm starter beside a page): it waits for a
    # line on its standard input, then burns a known second of CPU.
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()\n" + _SPIN.format(s=1.0)],
                         stdin=subprocess.PIPE)
    try:
        meter = processes.LoadMeter()
        p.stdin.write(b"go\n")
        p.stdin.flush()
        spent = _cpu_of_exited(p)
        load = meter.result()
    finally:
        p.stdin.close()
        p.wait()
    assert spent >= 0.95  # clock ticks of 10 ms
    # The machine's busy time holds the other process's CPU (and whatever else ran); ticks are 10 ms.
    assert load["others_cpu_s"] >= spent - 0.05, (load, spent)
    assert load["own_cpu_s"] < spent / 2, (load, spent)
    assert 0.0 < load["others_share"] <= 1.0 and load["cpus"] == os.cpu_count()
    if processes.PSI_CPU.exists():
        assert 0.0 <= load["pressure"] <= 1.0
    assert processes.under_load({**load, "others_share": processes.LOADED_SHARE + 0.01})
    assert not processes.under_load({**load, "others_share": processes.LOADED_SHARE}) and not processes.under_load(None)


def test_the_load_meter_counts_a_childs_cpu_as_the_jobs_own_before_and_after_it_is_reaped(spawns):
    busy0 = processes._busy_cpu_s()
    meter = processes.LoadMeter()
    p = subprocess.Popen([sys.executable, "-c", _SPIN.format(s=1.0)])
    spent = _cpu_of_exited(p)
    unreaped = meter.result()  # a zombie keeps its times, and the job started it
    p.wait()  # reaped: its time moves into this process's children's
    load = meter.result()
    busy = processes._busy_cpu_s() - busy0
    assert spent >= 0.95  # clock ticks of 10 ms
    assert unreaped["own_cpu_s"] >= spent - 0.05 and load["own_cpu_s"] >= spent - 0.05, (unreaped, load, spent)
    # Other work is the machine's busy time less the job's: the child's second is not in it.
    assert load["others_cpu_s"] <= busy - spent + 0.05, (load, busy, spent)


@pytest.mark.parametrize("way", ["forked", "cold", "forkserver", "spawn", "launcher"])
def test_every_way_the_lab_starts_ranks_books_their_cpu_as_the_jobs_own(way, spawns):
    """Accounting, not timing: two ranks burn 1.5 CPU-seconds each by their own clocks, started as a launcher forks
    them, as cold processes, from run_local's fork server (which reaps them, not this process), spawned, or by a
    launcher this process starts. The meter books at least 90 % of that as the job's own, and beyond what the same
    way costs with ranks that burn nothing, less than twice what they burnt (a rank counted twice would be; how
    much CPU starting a rank takes varies by half a second and more when a fresh interpreter imports torch)."""
    proc = subprocess.run([sys.executable, "-m", "lab.testing.cpu_ways", way, "1.5"], capture_output=True, text=True,
                          timeout=300, cwd=str(Path(__file__).resolve().parents[1]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["own"] >= 0.9 * got["burnt"], got
    assert got["own"] - got["idle_own"] <= 1.5 * got["burnt"], got


def test_load_words_name_the_share_and_stay_silent_for_a_quiet_run():
    quiet = {"others_share": 0.05, "cpus": 2, "pressure": 0.01}
    busy = {"others_share": 0.5, "cpus": 2, "pressure": 0.4}
    assert processes.load_words(quiet) == "" and processes.load_words(None) == ""
    words = processes.load_words(busy)
    assert "50 %" in words and "40 %" in words
