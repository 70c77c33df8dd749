"""Command line of the training job.

Local (the lab starts the worker processes)::

    python -m lab.train --workers 2 --steps 100 --optimizer adabelief
    python -m lab.train --scenario my.json --set sync=param_server --set lr=0.003

Under torchrun (one process per rank; on several machines too)::

    torchrun --standalone --nproc-per-node 2 -m lab.train --scenario my.json --steps 50

The last line printed is ``run <id> test_accuracy <float>``. The run store is the file in the
environment variable LAB_DB (default ./data/runs.db).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from lab.errors import LabError, first_line
from lab.scenario.document import (
    MAX_SCENARIO_BYTES,
    TRAINING_FIELDS,
    Scenario,
    default_scenario,
)
from lab.scenario.text import RUN_NAME_MAX, check_depth, check_name, shown
from lab.store.runs import check_run_id
from lab.train import fork
from lab.train.launcher import JobSpec, launch, run_job
from lab.train.ranks import rank_backend

# shortcut flag -> Training field
SHORTCUTS = {
    "workers": int, "steps": int, "optimizer": str, "sync": str, "model": str, "dataset": str, "lr": float,
    "batch_size": int, "seed": int, "split": str, "allreduce_impl": str, "eval_every": int,
    "check_every": int, "checkpoint_every": int, "exchange_share": float, "dirichlet_alpha": float,
    "dataset_size": int,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", help="scenario JSON file (default: digits, MLP, even split, gradient all-reduce)")
    for name, typ in SHORTCUTS.items():
        setting = TRAINING_FIELDS[name]
        kw = {"choices": setting.choices} if setting.choices else {}  # the model's take an uploaded network's name too
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=typ, default=None,
                       help=f"training.{name} (default {setting.default!r})", **kw)
    p.add_argument("--emulate", dest="emulate", action="store_true", default=None,
                   help="emulate the devices and links of the topology (needs --set worker_devices=[...])")
    p.add_argument("--no-emulate", dest="emulate", action="store_false")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any training field; VALUE is JSON when it parses (e.g. worker_devices='[\"gpu\",\"host\"]')")
    p.add_argument("--onnx", metavar="FILE", help="train your own network from an ONNX file (checked and kept in "
                   "the data folder, as the Placement page keeps an upload; it becomes training.model)")
    p.add_argument("--run-id", help="id of the run in the store (default: a new one)")
    p.add_argument("--name", help="name of the run (default: the scenario's name)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--spec", metavar="FILE", help=argparse.SUPPRESS)  # a job spec, as the lab's own processes get one
    return p


def load_scenario(path: str | None) -> Scenario:
    if not path:
        return default_scenario()
    try:
        size = os.stat(path).st_size  # before reading: a huge file is refused without loading it
        if size > MAX_SCENARIO_BYTES:
            raise LabError(f"the file is {size:,} bytes; at most {MAX_SCENARIO_BYTES:,} are accepted", where=path)
        with open(path, "rb") as f:
            return Scenario.from_json(f.read(MAX_SCENARIO_BYTES + 1))
    except OSError as exc:
        raise LabError(f"cannot read the scenario file: {exc.strerror}", where=path) from None


def _no_constant(name: str):
    raise ValueError(name)


def apply_overrides(sc: Scenario, args: argparse.Namespace) -> Scenario:
    changes = {k: getattr(args, k) for k in (*SHORTCUTS, "emulate") if getattr(args, k) is not None}
    for item in args.set:
        if "=" not in item:
            raise LabError(f"needs FIELD=VALUE, got {shown(item)}", where="--set")
        k, v = item.split("=", 1)
        k = k.strip()
        if k not in TRAINING_FIELDS:
            raise LabError(f"unknown training field {shown(k)}; fields: {sorted(TRAINING_FIELDS)}", where="--set")
        try:  # a JSON value (number, true, list); NaN and Infinity stay text, which no field takes
            v = check_depth(json.loads(v, parse_constant=_no_constant), where=f"--set {k}")
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, LabError):
                raise
        changes[k] = v
    if getattr(args, "onnx", None):
        from lab.scenario import onnx_models  # imports torch: only for a network from a file

        try:
            data = open(args.onnx, "rb").read(onnx_models.MAX_BYTES + 1)
        except OSError as exc:
            raise LabError(f"cannot read {shown(args.onnx)}: {exc.strerror}", where="--onnx") from None
        changes["model"] = onnx_models.keep(data, os.path.basename(args.onnx)).name
    if not changes:
        return sc
    sc = sc.replace(training=sc.training.replace(**changes))
    sc.check_devices()
    return sc


def refuse(exc: LabError) -> int:
    """Say what was wrong on one line of standard error; exit code 2 (bad input)."""
    print("lab.train: " + " ".join(str(exc).split()), file=sys.stderr)
    return 2


def _read_spec(path: str) -> dict:
    """A job spec (JSON) from a file, or from standard input for ``-``: the job manager starts a cold
    launcher with its :class:`lab.train.launcher.JobSpec` there, a cold launcher its workers with theirs."""
    try:
        raw = sys.stdin.buffer.read(MAX_SCENARIO_BYTES + 1) if path == "-" else open(path, "rb").read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise LabError(f"cannot read the job spec: {exc.strerror}", where=path) from None
    try:
        spec = json.loads(raw)
    except ValueError as exc:
        raise LabError(f"the job spec is not JSON: {exc}", where=path) from None
    if not isinstance(spec, dict):
        raise LabError("the job spec is not a JSON object", where=path)
    return spec


def _run_spec(path: str) -> int:
    try:
        spec = _read_spec(path)
        if os.environ.get("RANK") is None:  # the job manager's cold launcher
            return run_job(JobSpec.from_dict(spec))
        sc = Scenario.from_dict(spec.get("scenario"))
        run_id = check_run_id(spec.get("run_id"))
    except LabError as exc:
        return refuse(exc)
    return _rank(sc, run_id, None, quiet=True)


def _rank(sc: Scenario, run_id: str | None, name: str | None, quiet: bool) -> int:
    """This process is one rank of a job (started by a launcher or by torchrun)."""
    from lab.train.rank import run_rank

    fork.exit_with(lambda: run_rank(sc, run_id, name=name, quiet=quiet))  # leaves the process


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.spec:
        return _run_spec(args.spec)
    try:
        sc = apply_overrides(load_scenario(args.scenario), args)
        if args.run_id:
            check_run_id(args.run_id)
        if args.name is not None:  # a run's name is shown on every page that lists runs
            args.name = check_name(args.name, "--name", what="the run's name", max_len=RUN_NAME_MAX)
    except LabError as exc:
        return refuse(exc)
    if os.environ.get("RANK") is not None and os.environ.get("WORLD_SIZE") is not None:
        return _rank(sc, args.run_id, args.name, args.quiet)  # under torchrun
    # Started by a person or by the job manager: this process launches the job's ranks.
    try:
        res = launch(sc, args.run_id, name=args.name, ranks=rank_backend(own_process=True))
    except LabError as exc:
        return refuse(exc)
    if res.status != "done":
        print(f"lab.train: run {res.run_id} {res.status}" + (f": {first_line(res.error)}" if res.error else ""),
              file=sys.stderr)
    if not args.quiet:
        print(f"run {res.run_id} test_accuracy {res.test_accuracy:.6f}", flush=True)
    return res.exit_code
