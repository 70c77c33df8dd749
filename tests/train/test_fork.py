"""lab.train.fork: a forked child answers as a subprocess.Popen does (exit code, wait with a time
limit, kill, terminate), and becomes a process with the streams, environment and folder it is given."""

import os
import signal
import subprocess
import time

import pytest

from lab.processes import rss_mb
from lab.train.fork import Forked, become, fork_child

pytestmark = pytest.mark.usefixtures("spawns")  # every test here starts processes


def _fork(body) -> Forked:
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            code = body()
        finally:
            os._exit(code if isinstance(code, int) else 1)
    return Forked(pid, ["child"])


def test_a_forked_child_reports_its_exit_code_like_popen():
    p = _fork(lambda: 3)
    assert p.wait(timeout=120) == 3
    assert p.returncode == 3 and p.poll() == 3


def test_wait_with_a_time_limit_raises_as_popen_does_and_kill_ends_the_child():
    p = _fork(lambda: time.sleep(60) or 0)
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.2)
    assert p.poll() is None
    p.kill()
    assert p.wait(timeout=120) == -signal.SIGKILL
    p.kill()  # a second kill of an ended child does nothing, as Popen's does


def test_terminate_sends_sigterm():
    p = _fork(lambda: time.sleep(60) or 0)
    p.terminate()
    assert p.wait(timeout=120) == -signal.SIGTERM


def test_a_child_reaped_elsewhere_counts_as_gone():
    p = _fork(lambda: 0)
    os.waitpid(p.pid, 0)  # someone else reaped it: how it ended is not known any more
    assert p.poll() == -signal.SIGKILL


def test_become_gives_the_child_its_streams_environment_and_folder(tmp_path):
    out = tmp_path / "out.txt"

    def child() -> int:
        fd = os.open(str(out), os.O_WRONLY | os.O_CREAT, 0o644)
        become({"ONLY": "this"}, str(tmp_path), fd, fd)
        os.write(1, f"{os.getcwd()} {sorted(os.environ)} {os.read(0, 1) == b''}\n".encode())
        return 0

    p = _fork(child)
    assert p.wait(timeout=120) == 0
    cwd, rest = out.read_text().split(" ", 1)
    assert cwd == str(tmp_path)
    assert rest.strip() == "['ONLY'] True"  # nothing inherited but what it was given; stdin empty


def test_fork_child_runs_the_function_in_a_child_with_its_log_and_exit_code(tmp_path):
    log = tmp_path / "child.log"

    def say_group() -> int:
        os.write(2, f"group {os.getpgid(0)} pid {os.getpid()}\n".encode())  # fd 2: pytest holds sys.stderr
        return 5

    p = fork_child(say_group, {"ONLY": "this"}, log)
    assert p.wait(timeout=120) == 5
    assert f"group {os.getpgid(0)} pid {p.pid}" in log.read_text()  # in this process's group
    # a new session: the child leads its own process group; an exception is its traceback and exit 1
    leader = fork_child(lambda: say_group() and 1 / 0, {}, log, new_session=True)
    assert leader.wait(timeout=120) == 1
    text = log.read_text()
    assert f"group {leader.pid} pid {leader.pid}" in text and "ZeroDivisionError" in text


def test_rss_mb_reads_a_live_process_and_is_zero_for_a_gone_one():
    assert rss_mb() > 1.0
    p = _fork(lambda: 0)
    p.wait(timeout=120)
    assert rss_mb(p.pid) == 0.0
