"""Ranks that burn a known amount of CPU, started each way the lab starts processes, inside a
:class:`lab.processes.LoadMeter`: what the meter books as the job's own is checked against what they burnt.

    python -m lab.testing.cpu_ways WAY SECONDS

prints one JSON line: ``{"way", "burnt", "own", "others", "idle_own"}``. ``burnt`` is the CPU the two ranks
burnt (``SECONDS`` each, by their own process clocks); ``own`` what the meter booked as the job's own;
``idle_own`` what it booked for the same way with ranks that burn nothing, started after a first group warmed the
way up (the cost of starting the processes, which is the job's own too)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = 2
SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"


def burn(rank: int, world: int, port: int, seconds: float) -> None:
    """A rank of :func:`lab.comm.spawn.run_local` that burns ``seconds`` of its own CPU."""
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def _burn_then_exit(seconds: float):
    return lambda: burn(0, 1, 0, seconds) or 0


def _forked(seconds: float) -> None:
    """Forked from this process and reaped by it: a launcher's ranks (:class:`lab.train.ranks.ForkedRanks`)."""
    from lab.train.fork import fork_child

    with tempfile.TemporaryDirectory() as d:
        kids = [fork_child(_burn_then_exit(seconds), {}, Path(d) / f"rank{r}.log") for r in range(RANKS)]
        for k in kids:
            k.wait()


def _cold(seconds: float) -> None:
    """New Python processes this process waits for: cold ranks (:class:`lab.train.ranks.ProcessRanks`), the
    all-reduce measurement's workers."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)]) for _ in range(RANKS)]
    for p in procs:
        p.wait()


def _run_local(method: str):
    def start(seconds: float) -> None:
        from lab.comm.spawn import run_local

        run_local(burn, RANKS, (seconds,), timeout_s=300, start_method=method)
    return start


def _launcher(seconds: float) -> None:
    """A process of the job's own that forks the ranks and reaps them, itself started by this one: the
    command-line launcher, or a launcher the warm starter forked."""
    subprocess.run([sys.executable, "-m", "lab.testing.cpu_ways", "forked", str(seconds), "--bare"], check=True)


WAYS = {"forked": _forked, "cold": _cold, "forkserver": _run_local("forkserver"), "spawn": _run_local("spawn"),
        "launcher": _launcher}


def metered(way: str, seconds: float) -> dict:
    from lab.processes import LoadMeter

    m = LoadMeter()
    WAYS[way](seconds)
    return m.result()


def main(argv: list[str]) -> None:
    way, seconds = argv[0], float(argv[1])
    if "--bare" in argv:  # the ranks alone, no meter: a launcher started by another measurement
        WAYS[way](seconds)
        return
    WAYS[way](0.0)  # the first group starts what later ones reuse (the fork server, the imports)
    idle = metered(way, 0.0)
    load = metered(way, seconds)
    print(json.dumps({"way": way, "burnt": RANKS * seconds, "own": load["own_cpu_s"], "others": load["others_cpu_s"],
                      "idle_own": idle["own_cpu_s"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
