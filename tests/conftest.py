"""Shared test helpers."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path

import pytest

# Most tests hold one job running while others wait (a blocker) and run long jobs of up to the Scenario's 100,000
# steps: for them a job does not yield and has no step limit. The tests of the class queue's slice and of the
# teacher's limits set their own values (tests/jobs/test_fair_queue.py, the queue's journey).
os.environ.setdefault("LAB_SLICE_S", "3600")
os.environ.setdefault("LAB_JOB_MAX_STEPS", "100000")
# Ray's test clusters report nothing anywhere (the lab sends no usage statistics).
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# A test that starts something (processes, a Streamlit app under AppTest or as a server, a browser, a cluster) is
# slow, so that `pytest -m "not slow"` is the fast inner loop (README). It says so by the fixtures it requests:
# ``spawns`` (a module whose every test starts processes requests it for all of them with
# ``pytestmark = pytest.mark.usefixtures("spawns")``), or ``browser``. A test that is slow for seconds of arithmetic
# alone carries ``pytest.mark.slow`` itself.
SLOW_FIXTURES = {"spawns", "browser"}


#: The zoo's larger networks: building and tracing one takes seconds of arithmetic, so a test of every model is
#: slow for them (:func:`every_model`).
HEAVY_MODELS = {"resnet18", "mobilenet_v3_small", "vgg11"}


def every_model(names=None) -> list:
    """Every model name (``lab.scenario.names.MODELS``) to parametrize a test with, the heavy ones marked slow."""
    from lab.scenario.names import MODELS

    return [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY_MODELS else n for n in (names or MODELS)]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the groups into its schedule
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        # One browser journey at a time (on one test worker, beside the workers of everything else): a journey
        # waits on what a person sees, and two of them at once on two cores starve each other's servers. The
        # Ray cluster's journey keeps its own group, one cluster at a time.
        if "journeys" in item.path.parts and not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group("browser"))


@pytest.fixture
def spawns():
    """Requested by a test that starts processes (a job, a gloo group, a bench script, the warm starter): the
    test is slow, out of the fast loop."""
    return None


def wait_for(cond, timeout: float = 120.0, what: str = "condition") -> None:
    """Poll ``cond`` every 0.1 s until it holds; fail, naming ``what``, after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def default_with(**training):
    """The default scenario with ``training`` settings changed (checked against the Scenario's table)."""
    from lab.scenario.document import default_scenario

    sc = default_scenario()
    return sc.replace(training=sc.training.replace(**training))


def start_warm(starter, sc, log: Path, store_path=None, run_id: str | None = None):
    """A job forked by the warm ``starter`` as the job manager starts one: its run queued in the
    store (default LAB_DB), then its :class:`lab.train.launcher.JobSpec`; returns the run id and the
    launcher's handle."""
    from lab import settings
    from lab.store.runs import RunStore
    from lab.train.launcher import JobSpec, preflight

    store = RunStore(store_path)
    sc, placed = preflight(sc)
    rid = store.create_run(sc, status="queued", run_id=run_id)
    spec = JobSpec(rid, sc.to_dict(), str(store.path.resolve()), placed=placed.to_dict() if placed else None)
    return rid, starter.launch(spec, settings.child_env(LAB_DB=str(store.path.resolve())), str(log))


def run_command(sc, store_path=None, timeout: float = 240.0):
    """The job ``sc`` run from the command line (``python -m lab.train --scenario FILE``), whose launcher is a
    process of the job's own and so forks its ranks, in the store ``store_path`` (default LAB_DB); its
    :class:`lab.train.launcher.LaunchResult` as :func:`lab.train.launcher.launch` returns it."""
    import subprocess
    import tempfile

    from lab import settings
    from lab.store.runs import RunStore, new_run_id
    from lab.train.launcher import LaunchResult, final_accuracy

    store = RunStore(store_path)
    rid = new_run_id()
    with tempfile.TemporaryDirectory(prefix="lab-scenario-") as d:
        path = Path(d) / "scenario.json"
        path.write_text(sc.to_json())
        proc = subprocess.run([sys.executable, "-m", "lab.train", "--scenario", str(path), "--run-id", rid, "--quiet"],
                              cwd=ROOT, env=settings.child_env(LAB_DB=str(store.path.resolve())), capture_output=True,
                              text=True, timeout=timeout)
    assert rid in set(store.list_runs().id), proc.stderr[-2000:]  # refused before the run was stored
    run, ev = store.get_run(rid), store.job_records.events(rid)
    return LaunchResult(rid, run["status"], final_accuracy(store, rid), run["error"],
                        int((ev.event == "restart").sum()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab_db(tmp_path, monkeypatch):
    """A fresh run store for the test, passed to child processes through LAB_DB."""
    path = tmp_path / "runs.db"
    monkeypatch.setenv("LAB_DB", str(path))
    return path


def app_test(page: str | None = None, timeout: float = 60, query: dict | None = None):
    """An AppTest of app.py (opened with the link's ``query`` parameters), switched to ``page``
    (e.g. "pages/topology.py") and run once."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    return at


def assert_no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert not errors, errors


# ---- Ray's multi-node test cluster on this machine ------------------------------------------------

RAY_NODE_MEMORY = 80 * 2**20  # each node's object store: small, on a small machine


@contextlib.contextmanager
def ray_test_cluster(*nodes: dict):
    """Ray's own multi-node test cluster: a head that runs no rank (the class server) and one worker node per
    ``nodes`` entry (``ray.cluster_utils.Cluster.add_node`` arguments); yields the cluster. Ray's head installs
    its own SIGTERM handler in this process and leaves it after its shutdown: the handler goes with the
    cluster, so a later test's forked child still ends on SIGTERM."""
    import signal

    from ray.cluster_utils import Cluster

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    # Ray starts its workers at niceness 15; these nodes share one machine with the tests and whatever else
    # loads it, where a worker that imports torch at that niceness waits minutes for a core: the ranks run at
    # the tests' own priority, as they would on nodes of their own.
    nice = os.environ.get("RAY_worker_niceness")
    os.environ["RAY_worker_niceness"] = "0"
    cluster = Cluster()
    try:
        for attempt in (1, 2):
            try:  # the first node added is the head
                cluster.add_node(num_cpus=0, object_store_memory=RAY_NODE_MEMORY, include_dashboard=False)
                cluster.nodes_added = [cluster.add_node(object_store_memory=RAY_NODE_MEMORY, **n) for n in nodes]
                cluster.wait_for_nodes()
                break
            except Exception as exc:  # noqa: BLE001 - Ray's own: a node's raylet missed Ray's fixed 30 s to register
                if attempt == 2 or "timed out during startup" not in str(exc):
                    raise
                cluster.shutdown()  # a busy machine: the whole cluster again, once
                cluster = Cluster()
        yield cluster
    finally:
        cluster.shutdown()
        for s, h in handlers.items():
            signal.signal(s, h)
        if nice is None:
            os.environ.pop("RAY_worker_niceness", None)
        else:
            os.environ["RAY_worker_niceness"] = nice


# ---- a real app server and a real browser (headless Debian chromium via Playwright) ------------

CHROMIUM = os.environ.get("LAB_CHROMIUM", "/usr/bin/chromium")
# How long a journey waits for the page: a script rerun of a page that imports torch took 30 s and more on a
# slow CI machine with both cores busy and two other test workers training beside the browser.
WAIT_MS = int(os.environ.get("LAB_JOURNEY_WAIT_MS", "90000"))
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                "--disable-background-networking", "--disable-component-update"]


@contextlib.contextmanager
def lab_server(data: Path):
    """`streamlit run app.py` on a free port, with its run store in ``data``; yields the base URL."""
    import signal
    import subprocess
    import time
    import urllib.request

    port = free_port()
    env = dict(os.environ, LAB_DB=str(data / "runs.db"), LAB_DATA=str(data))
    # The server's stderr goes to a file: a pipe nobody reads fills after 64 KB of log and stops the server.
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed when the server is
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited: {(data / 'server.log').read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("streamlit did not become healthy within 120 s")
            time.sleep(0.3)
        yield base
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()


@pytest.fixture(scope="session")
def streamlit_server(tmp_path_factory):
    """One server for the browser tests (see :func:`lab_server`)."""
    with lab_server(tmp_path_factory.mktemp("server-data")) as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: install it (apt-get install -y chromium) or set LAB_CHROMIUM")
    from playwright.sync_api import sync_playwright

    # The driver is started, not entered: its stop at the end of a busy run once hung for the whole 300 s of the
    # last test's time. It ends with this process (it exits when its pipe closes).
    p = sync_playwright().start()
    b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
    yield b
    b.close()


def settle(page, timeout_ms: int = WAIT_MS) -> None:
    """Wait until the app's script run is finished."""
    page.wait_for_selector("[data-testid='stApp']", timeout=timeout_ms)
    page.wait_for_function(
        "() => { const a = document.querySelector(\"[data-testid='stApp']\");"
        " return a && a.getAttribute('data-test-script-state') === 'notRunning'; }", timeout=timeout_ms)
    page.wait_for_timeout(300)


def page_url_path(file: str) -> str:
    """The URL path st.navigation gives a page file (home is the default page at /)."""
    stem = Path(file).stem
    return "/" if stem == "home" else "/" + stem
