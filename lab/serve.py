"""The lab's server in one command. ``python -m lab.serve`` listens on this machine only (the safe default);
``python -m lab.serve --class`` opens it to a class on every address of this machine with a teacher's token: the one
LAB_TEACHER_TOKEN gives, refused unless strong (on a network the teacher is whoever knows it), or, when none is
given, a strong one it makes and prints once for the teacher.

It checks, then runs ``streamlit run app.py`` with the address and port (the app makes the same check when it is
started some other way, and shows the refusal instead of the lab).
"""

from __future__ import annotations

import argparse
import os
import sys

from lab.jobs.access import MAKE_TEACHER_TOKEN, make_teacher_token, teacher_token, teacher_token_problem
from lab import settings
from lab.settings import ROOT

LOCAL = ("localhost", "127.0.0.1", "::1")
CLASS_ADDRESS = "0.0.0.0"


def refusal(address: str, token: str) -> str | None:
    """Why the lab may not listen on ``address`` with this teacher token, or None."""
    problem = teacher_token_problem(token)
    if problem:
        return problem
    if address not in LOCAL and not token:
        return (f"the lab listens beyond this machine ({address}) only with a teacher's token: set LAB_TEACHER_TOKEN "
                f"(make one with {MAKE_TEACHER_TOKEN}) and start it again")
    return None


def command(address: str, port: int) -> list[str]:
    """The ``streamlit run`` command of the server on ``address``:``port``."""
    return [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.address", address,
            "--server.port", str(port), "--server.headless", "true"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--class", dest="for_class", action="store_true",
                   help=f"open the lab to a class: listen on {CLASS_ADDRESS} (every address of this machine)")
    p.add_argument("--behind-proxy", action="store_true",
                   help="serve a class through a reverse proxy on this machine (docs/class-server.md): listen on 127.0.0.1 only, "
                        "with a teacher's token, and count each browser by the address the proxy sets in "
                        "X-Forwarded-For (LAB_PROXY=1)")
    p.add_argument("--address", default=None, help="the address to listen on (default localhost)")
    p.add_argument("--port", type=int, default=8501, help="the port (default 8501)")
    args = p.parse_args(argv)
    address = args.address or ("127.0.0.1" if args.behind_proxy else CLASS_ADDRESS if args.for_class else "localhost")
    if args.behind_proxy:
        settings.put("LAB_PROXY", "1")  # read by the pages, which the exec below hands the environment on to
    if (address not in LOCAL or args.behind_proxy) and not teacher_token():
        # The server and the pages read the token from the environment, which the exec below hands on.
        settings.put("LAB_TEACHER_TOKEN", make_teacher_token())
        print("lab.serve: no LAB_TEACHER_TOKEN was given, so this server's teacher token is\n\n    "
              f"{teacher_token()}\n\nType it into the Jobs page's sign-in. It lasts until the server "
              "stops; set LAB_TEACHER_TOKEN to keep one across restarts.", file=sys.stderr)
    why = refusal(address, teacher_token())
    if why:
        print(f"lab.serve: refused: {why}", file=sys.stderr)
        return 2
    cmd = command(address, args.port)
    print("lab.serve: " + " ".join(cmd[1:]), file=sys.stderr)
    os.execv(cmd[0], cmd)
    return 0  # not reached: the server replaces this process


if __name__ == "__main__":
    sys.exit(main())
