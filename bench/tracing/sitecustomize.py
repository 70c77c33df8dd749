"""Loaded by every Python process of a traced job (this folder is put first on PYTHONPATH by
bench/bench_job_path.py): it records each lab function the process calls, once, with the time of
its first call, and every call of the functions that write or read a scenario or check it, into one
file shared by all the job's processes. Forked children inherit the hook and start their own record."""
import os
import sys
import threading
import time

_OUT = os.environ.get("JOBPATH_TRACE")
if _OUT:
    _ROOT = os.environ["JOBPATH_ROOT"].rstrip("/") + "/lab/"
    _EVERY = {"to_json", "from_json", "to_dict", "from_dict", "preflight", "check_scenario", "job_layout",
              "parse_args"}
    _state = {"pid": None, "seen": set()}

    def _hook(frame, event, arg):  # noqa: ARG001
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename
        name = code.co_name
        if name == "parse_args" and "argparse" in path:
            path = _ROOT + "argparse"
        elif not path.startswith(_ROOT) or name.startswith("<") or not code.co_flags & 0x2:
            return  # a module's or a class's body runs once at its import: not a call on the path
        pid = os.getpid()
        if _state["pid"] != pid:
            _state["pid"], _state["seen"] = pid, set()
        key = (path, code.co_firstlineno)
        if key in _state["seen"] and name not in _EVERY:
            return
        _state["seen"].add(key)
        qual = getattr(code, "co_qualname", name)
        # opened for each line: a forked child closes every descriptor it did not inherit on purpose
        fd = os.open(_OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{pid}\t{time.time():.6f}\t{path[len(_ROOT) - 4:]}\t{qual}\n".encode())
        finally:
            os.close(fd)

    sys.setprofile(_hook)
    threading.setprofile(_hook)
