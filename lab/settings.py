"""Every ``LAB_*`` environment variable and every data path, read in one place.

Values are read when asked, never at import: a process forked from a warm parent, or a test that
changes the environment, sees the value of the moment. Two kinds of variable live here: the ones a
person sets (the table :data:`VARIABLES`, listed in docs/settings.md) and the ones the lab sets for the
processes it starts (the launcher-to-worker protocol, :data:`PROTOCOL`).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the project folder: child processes get it on PYTHONPATH


@dataclass(frozen=True)
class Variable:
    name: str
    default: float | int | str
    meaning: str


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable("LAB_DB", "", "the run store's SQLite file (default ./data/runs.db)"),
    Variable("LAB_DATA", "", "folder for checkpoints, logs, the data cache and the machine profile"),
    Variable("LAB_JOB_CAPACITY", 1, "jobs that run at once on the class server"),
    Variable("LAB_JOB_NICE", 10, "niceness of job processes, so page views win the CPU (0-19)"),
    Variable("LAB_JOB_IDLE", "1", "1: job processes run under Linux's SCHED_IDLE policy (a page view takes a core "
             "from them at once); 0: niceness only"),
    Variable("LAB_PAGE_CPUS", 0, "cores kept for the app's pages: jobs run on the others (none kept on a one-core "
             "machine; 0: jobs use every core)"),
    Variable("LAB_SLOTS_PER_CPU", 0, "worker slots per CPU for the job queue (0: at least 2, about 5 in all)"),
    Variable("LAB_SWEEP_S", 5.0, "seconds between sweeps for runs whose launcher died"),
    Variable("LAB_TEACHER_TOKEN", "", "the teacher's secret: typed into the Jobs page's sign-in, it manages every run"),
    Variable("LAB_MAX_ACTIVE_PER_OWNER", 60, "queued or running jobs one student may have at once (a comparison of "
             "10 repeats is 60)"),
    Variable("LAB_SLICE_S", 5.0, "seconds a job runs before it yields to a job of a student who has none running: "
             "that job starts beside it and the long one drops to the lowest priority"),
    Variable("LAB_JOB_MAX_STEPS", 20000, "most steps one job may ask for (the teacher may change it on the Jobs page)"),
    Variable("LAB_JOB_MAX_S", 900.0, "seconds a job may run before it is stopped (0: no limit; the teacher may change "
             "it)"),
    Variable("LAB_JOB_MAX_PROCS", 8, "most processes one job may start (the teacher may change it)"),
    Variable("LAB_MAX_RESTARTS", 3, "restarts of a job whose fault policy is recover"),
    Variable("LAB_HEARTBEAT_EVERY", 0.5, "seconds between a worker's heartbeats"),
    Variable("LAB_HEARTBEAT_TIMEOUT", 30.0, "seconds without a heartbeat before a worker counts as hung"),
    Variable("LAB_START_TIMEOUT", 180.0, "seconds a worker may take to start and join the group"),
    Variable("LAB_FROZEN_TIMEOUT", 30.0, "seconds a stopped (SIGSTOP) worker is waited for"),
    Variable("LAB_LAUNCHER_STALE", 30.0, "seconds after which a launcher without /proc evidence is taken for dead"),
    Variable("LAB_GLOO_TIMEOUT", 60.0, "seconds a gloo collective may wait for a peer"),
    Variable("LAB_FLUSH_EVERY", 10, "training steps between measurement gathers (live charts refresh at this pace)"),
    Variable("LAB_CALIBRATION_PIN", "1", "0 turns off CPU pinning while calibrating"),
    Variable("LAB_WARM", "1", "0 starts every job's launcher cold (a new Python, which loads torch and forks "
             "its workers) instead of forking it from the warm starter"),
    Variable("LAB_RAY_ADDRESS", "", "a Ray cluster to run jobs on: auto (the cluster this machine is a node of) or "
             "its head's host:port; empty: jobs run on this machine"),
    Variable("LAB_RAY_JOBS", 32, "jobs on the Ray cluster at once, running or waiting there for room (each has its "
             "launcher on this machine)"),
    Variable("LAB_RAY_WAITING", 1, "jobs handed to the Ray cluster that have not started yet: Ray queues these until "
             "all of a job's ranks fit; the lab's fair queue keeps the rest, in its order"),
    Variable("LAB_NEW_PER_CLIENT", 6, "new identities, and seats joined, one client address may take at once; then "
             "one per LAB_NEW_EVERY_S (raise it when a whole class reaches the server through one address)"),
    Variable("LAB_PROXY", "", "1: the lab is behind a reverse proxy on this machine that sets X-Forwarded-For to "
             "the client's address (docs/class-server.md); each browser's address is read from it, and one the proxy sends "
             "without it may not join a class"),
    Variable("LAB_NEW_EVERY_S", 10.0, "seconds in which one client address earns one more new identity or seat"),
    Variable("LAB_WARM_MAX_MB", 2048.0, "resident memory (MB) above which the warm starter is restarted"),
    Variable("LAB_UPLOAD_FLOPS", 5e9, "forward FLOPs a sample an uploaded ONNX network may cost, priced from its "
             "operators before anything runs (torchvision's resnet18 at 224x224 is 3.6e9)"),
    Variable("LAB_UPLOAD_BYTES", 3e8, "bytes a sample an uploaded ONNX network may take: its weights and constants "
             "and every operator's output at a batch of one (resnet18 at 224x224: 7.8e7)"),
)}

# Set by the lab for the processes it starts; a person never sets these.
PROTOCOL = ("LAB_RANK_CPUS", "LAB_LAUNCHER_PID", "LAB_ATTEMPT", "LAB_RDZV_PREFIX", "LAB_STORE_FD",
            "LAB_ERROR_FILE", "LAB_HEARTBEAT_FILE")


def raw(name: str) -> str:
    """The variable's text ('' when unset); only names this module knows."""
    if name not in VARIABLES and name not in PROTOCOL:
        raise KeyError(f"{name} is not one of the lab's variables")
    return os.environ.get(name) or ""


def put(name: str, value: str) -> None:
    """Set a variable for this process and every process it starts or becomes (a command that execs the server)."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not one of the lab's variables")
    os.environ[name] = value


def number(name: str) -> float:
    """A numeric variable, its default when unset or not a number."""
    default = VARIABLES[name].default
    try:
        return float(raw(name) or default)
    except ValueError:
        return float(default)


def integer(name: str) -> int:
    return int(number(name))


def flag(name: str) -> bool:
    return raw(name).strip().lower() in ("1", "true", "yes", "on")


def warm_starts() -> bool:
    """Whether the job manager forks jobs from its warm starter (LAB_WARM, on unless "0")."""
    return (raw("LAB_WARM").strip() or VARIABLES["LAB_WARM"].default) not in ("0", "false", "no", "off")


def ray_address() -> str:
    """The Ray cluster jobs run on (LAB_RAY_ADDRESS), or '' for this machine."""
    return raw("LAB_RAY_ADDRESS").strip()


def job_nice() -> int:
    """Scheduling priority of job processes: training is batch work, the pages are interactive,
    so jobs run niced and a classroom's page views win the CPU."""
    return max(0, min(19, integer("LAB_JOB_NICE")))


def job_idle() -> bool:
    """Whether job processes run under Linux's SCHED_IDLE policy (LAB_JOB_IDLE, on unless "0"): measured with a
    class's page views beside jobs on both cores of a 2-core server, nice 10 or 19 left the pages' 95th percentile
    five to eight times the idle server's, SCHED_IDLE 1.3 times (bench_classroom.py): a page view that wakes takes
    the core from an idle-policy process at once, where niceness only lowers its share."""
    return (raw("LAB_JOB_IDLE").strip() or str(VARIABLES["LAB_JOB_IDLE"].default)) not in ("0", "false", "no", "off")


def job_cpus() -> list[int]:
    """The cores jobs run on: this process's allowed cores but the first ``LAB_PAGE_CPUS`` (none by default: jobs
    under SCHED_IDLE, :func:`job_idle`, leave page views as fast as on an idle server; keeping a core is the other
    way, at half the cores for training on a 2-core server). Every core when none would be left."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    keep = max(0, integer("LAB_PAGE_CPUS"))
    return cpus[keep:] if len(cpus) > keep else cpus


def db_path() -> Path:
    """The run store: LAB_DB, else ./data/runs.db."""
    return Path(raw("LAB_DB") or Path("data") / "runs.db")


def data_dir(default: Path | None = None) -> Path:
    """LAB_DATA, else ``default``, else the run store's folder when LAB_DB is set, else ./data."""
    if raw("LAB_DATA"):
        return Path(raw("LAB_DATA"))
    if default is not None:
        return Path(default)
    if raw("LAB_DB"):
        return Path(raw("LAB_DB")).resolve().parent
    return Path.cwd() / "data"


def cache_dir() -> Path:
    """LAB_DATA/cache when set, else a folder in the system's temporary directory shared by runs."""
    return Path(raw("LAB_DATA")) / "cache" if raw("LAB_DATA") else Path(tempfile.gettempdir()) / "hetlab-cache"


#: One thread per maths library in every job process: a job runs about one process per core, and
#: a thread pool created before a fork does not work in the child.
THREAD_VARIABLES = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def one_thread_per_pool() -> None:
    """THREAD_VARIABLES in this process's environment, unless set: called before torch and numpy load in a
    process that forks a job's ranks (the warm starter, a launcher of its own), whose pools they read once."""
    for k, v in THREAD_VARIABLES.items():
        os.environ.setdefault(k, v)


def child_env(base: dict | None = None, **extra: str) -> dict:
    """The environment for a lab process: ``base`` (default this one) with the project on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env
