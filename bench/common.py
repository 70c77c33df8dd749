"""What every bench script shares: the lab importable from a checkout, one plain-text table and the score line."""
from __future__ import annotations

import argparse
import math
import numbers
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # a bench runs as a script from a checkout, not an installed package
    sys.path.insert(0, str(ROOT))


SMOKE_NOTE = "smoke run: smallest sizes, not a measurement"


def bench_parser(doc: str | None, smoke: str = "smallest sizes, seconds: checks the bench still runs "
                 "(the test suite runs this)") -> argparse.ArgumentParser:
    """A bench's command line: its docstring as the help, as written, and ``--smoke``, which every bench
    has so that the suite can run it at its smallest sizes."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help=smoke)
    return ap


def free_port() -> int:
    """A port that was free a moment ago, for a server the bench starts (it binds the port itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table(header: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the numbers right-aligned."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r))

    return "\n".join([line(cells[0]), "  ".join("-" * x for x in w)] + [line(r) for r in cells[1:]])


def score(name: str, values: Sequence[tuple], why_not: str | Mapping[str, str] | None = None) -> None:
    """Print a bench's last line, its score: ``<name>: <label> <number> <unit>, <label> <number> <unit>, ...``.

    Each value is ``(label, number)``, ``(label, number, unit)`` or ``(label, number, unit, decimals)``: an int
    prints as an int, any other number with ``decimals`` places (2 unless given); a unit of ``x`` (a ratio) stands
    against its number (``1.02x``), any other after a space (``23.1 %``); an empty label puts the number first
(``2 schedules``). A number that is not finite (nan, inf,
    None) is no score: the line then reads ``<name>: no score: <reason>``, naming each such value and why where
    ``why_not`` says (one reason for them all, or one per label), and the bench exits 1, so that a reader or a
    script comparing runs never takes a missing measurement for a number."""
    items, missing = [], []
    for label, number, *rest in values:
        unit = rest[0] if rest else ""
        decimals = rest[1] if len(rest) > 1 else None
        if ", " in label or "\n" in label:  # the items are split on ", ", on one line
            raise ValueError(f"a score's label may not contain ', ' or a newline: {label!r}")
        real = isinstance(number, numbers.Real) and not isinstance(number, bool)  # True is no measurement
        if not (real and math.isfinite(number)):
            shown = float(number) if real else repr(number)
            why = why_not.get(label) if isinstance(why_not, Mapping) else None
            missing.append(f"{label} is {shown}" + (f" ({why})" if why else ""))
            continue
        if isinstance(number, numbers.Integral) and decimals is None:
            text = str(int(number))
        else:
            text = f"{float(number):.{2 if decimals is None else decimals}f}"
        items.append((f"{label} " if label else "") + text + (unit if unit == "x" else f" {unit}" if unit else ""))
    if not values:
        missing.append("nothing was measured")
    if missing:
        reason = ", ".join(missing) + (f": {why_not}" if isinstance(why_not, str) and why_not else "")
        print(f"{name}: no score: {' '.join(reason.split())}", flush=True)  # a reason may quote a traceback
        raise SystemExit(1)
    print(f"{name}: {', '.join(items)}", flush=True)


def start_app(data: Path, port: int, *options: str) -> subprocess.Popen:
    """``streamlit run app.py`` on 127.0.0.1:``port`` with its run store and data in ``data`` (and
    more ``--option value`` pairs), in its own session; returns once it answers its health check."""
    env = dict(os.environ, LAB_DB=str(data / "runs.db"), LAB_DATA=str(data))
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none", *options],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return proc
        except OSError:
            time.sleep(0.3)
    stop_app(proc)
    raise SystemExit("streamlit did not start")


def stop_app(proc: subprocess.Popen) -> None:
    """End the app's whole session (the server, its warm starter and any job it started)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def run_in_session(args: list[str], timeout: float, **popen) -> subprocess.CompletedProcess:
    """Run ``args`` to its end in a session of its own, its output captured as text; on a timeout or an error the
    whole session (the command and every process it started) is killed and reaped."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         **popen)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    return subprocess.CompletedProcess(args, p.returncode, out, err)
