"""Cold starts: how much slower work runs after its process idled, the time an emulated placement run loses.

An emulated device's operator runs on this machine and then waits its extra time asleep; the next operator
starts on a core that idled meanwhile (its wait multiplies the operator's warm time, measured back to back, so
what idling costs is paid once). Here the calibration networks' forward runs operator by operator
(torch.fx, as the executor runs an emulated piece) with a wait before each operator, against back to back:

* **asleep**: ``time.sleep`` as the executor's emulated wait does, and as a wait for a message blocks;
* **busy**: a busy loop of the same length, the peer that tells idling from time passing;
* **a backward** after sleeping, against one right after its forward;
* **a whole step** (forward, backward, optimiser) after sleeping, against one with no wait: what the calibration
  measures (``wait_slowdown``) and the placement model charges every task by its process's idle time before it.

The waits take turns, so drifting load hits each alike; each cell is the median over the repeats, then over the
networks, as a ratio to the same work with no wait. Beside them, the saved profile's factor, when there is one.

    .venv/bin/python bench/bench_cold.py [--repeats 8] [--smoke]

The last line: ``cold: operators after 10 ms asleep <x>x, after 10 ms busy <x>x, a backward <x>x, a step <x>x``.
"""
from __future__ import annotations

import os
import statistics
import time

from common import SMOKE_NOTE, bench_parser, score, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.machine.cases import CALIBRATION_NETS, build_calibration_net  # noqa: E402
from lab.machine.probes import StepHarness  # noqa: E402
from lab.optim.optimizers import make_optimizer  # noqa: E402

#: Two MLPs, a CNN and an encoder block of the calibration networks: operators of 5-120 us here.
NETS = (1, 3, 7, 12)
WAITS = (0.001, 0.003, 0.01, 0.03)
SCORED_WAIT = 0.01


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(net: int, waits, repeats: int) -> dict:
    """Per wait and kind of wait, the median time of each piece of work, and with no wait."""
    import torch
    import torch.fx as fx
    import torch.nn.functional as F

    cls_name, kwargs = CALIBRATION_NETS[net]
    model = build_calibration_net(cls_name, kwargs)
    h = StepHarness(model, 16)
    opt = make_optimizer("adam", h.params, lr=1e-3)
    gm = fx.symbolic_trace(model)
    x, y = h.x[:16], h.y[:16]

    def one_by_one(before) -> float:
        spent = 0.0

        class Timed(fx.Interpreter):
            def run_node(self, n):
                nonlocal spent
                if n.op in ("placeholder", "output", "get_attr"):
                    return super().run_node(n)
                before()
                t0 = time.perf_counter()
                out = super().run_node(n)
                spent += time.perf_counter() - t0
                return out

        with torch.no_grad():
            Timed(gm).run(x)
        return spent

    def backward(before) -> float:
        loss = F.cross_entropy(model(x), y)
        before()
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    def step(before) -> float:
        before()
        t0 = time.perf_counter()
        h.forward_backward()
        opt.step()
        return time.perf_counter() - t0

    for _ in range(3):
        one_by_one(lambda: None), backward(lambda: None), step(lambda: None)
    got: dict = {}
    for _ in range(repeats):
        for w in (0.0, *waits):  # in turns
            asleep = (lambda w=w: time.sleep(w)) if w else (lambda: None)
            got.setdefault(("ops", "asleep", w), []).append(one_by_one(asleep))
            got.setdefault(("ops", "busy", w), []).append(one_by_one((lambda w=w: busy(w)) if w else (lambda: None)))
            got.setdefault(("backward", "asleep", w), []).append(backward(asleep))
            got.setdefault(("step", "asleep", w), []).append(step(asleep))
    return {k: statistics.median(v) for k, v in got.items()}


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--repeats", type=int, default=8)
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    nets, waits = NETS, WAITS
    if a.smoke:
        print(SMOKE_NOTE)
        nets, waits, a.repeats = NETS[:1], (SCORED_WAIT,), 1
    per_net = [measure(n, waits, a.repeats) for n in nets]

    def ratio(work: str, how: str, w: float) -> float:
        return statistics.median(m[(work, how, w)] / m[(work, how if work == "ops" else "asleep", 0.0)]
                                 for m in per_net)

    from lab.machine.profile import load_profile

    try:
        prof = load_profile()
    except Exception as exc:  # noqa: BLE001 - a damaged profile leaves the column empty, not the bench
        print(f"# the saved profile cannot be read ({exc})")
        prof = None
    rows = []
    for w in waits:
        rows.append([f"{w * 1e3:g}", f"{ratio('ops', 'asleep', w):.2f}", f"{ratio('ops', 'busy', w):.2f}",
                     f"{ratio('backward', 'asleep', w):.2f}", f"{ratio('step', 'asleep', w):.2f}",
                     f"{prof.wait_factor(w):.2f}" if prof is not None else "-"])
    base = [[CALIBRATION_NETS[n][0], f"{m[('ops', 'asleep', 0.0)] * 1e6:.0f}", f"{m[('backward', 'asleep', 0.0)] * 1e6:.0f}",
             f"{m[('step', 'asleep', 0.0)] * 1e6:.0f}"] for n, m in zip(nets, per_net)]
    print(f"# with no wait (us), the peer of every ratio below; median of {a.repeats} repeats")
    print(table(["network", "operators one by one", "a backward", "a whole step"], base))
    print(f"# after a wait, x the same work with no wait (median over {len(nets)} networks); model: the saved "
          "profile's after-wait factor, which the placement model charges every task")
    print(table(["wait (ms)", "operators, asleep", "operators, busy loop", "a backward, asleep",
                 "a whole step, asleep", "model"], rows))
    w = SCORED_WAIT
    score("cold", [(f"operators after {w * 1e3:g} ms asleep", ratio("ops", "asleep", w), "x"),
                   (f"after {w * 1e3:g} ms busy", ratio("ops", "busy", w), "x"),
                   ("a backward", ratio("backward", "asleep", w), "x"),
                   ("a step", ratio("step", "asleep", w), "x")])


if __name__ == "__main__":
    main()
