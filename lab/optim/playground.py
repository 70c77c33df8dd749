"""The optimiser playground: 2-D test functions and the AMSGrad counterexample, run with the lab's
optimisers (lab.optim.optimizers). Plain data out, no streamlit; the Optimisers page draws it.

Everything here is a real optimiser run (measured by running the code), on analytic functions.
Seeds fix the gradient noise, and every optimiser in one comparison sees the same noise.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from scipy.signal import lfilter

from lab.errors import LabError
from lab.optim.optimizers import OPTIMIZER_CLASSES, NonFiniteGradient, make_optimizer
from lab.scenario.names import COMPARED_OPTIMIZERS, OPTIMIZER_LABELS, OPTIMIZERS

MAX_STEPS = 5000
MAX_COUNTEREXAMPLE_STEPS = 50_500


@dataclass(frozen=True)
class TestFunction:
    """A 2-D function f(x, y) written with operators that work on numpy arrays and torch tensors."""

    key: str
    label: str
    formula: str
    f: Callable
    start: tuple[float, float]
    bounds: tuple[tuple[float, float], tuple[float, float]]
    minimum: tuple[float, float]
    lr: float                                    # a step size that shows the optimisers' differences
    noise: float = 0.0                           # std of the Gaussian noise added to each gradient
    log_contours: bool = True


def _rosenbrock(x, y):
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


def _beale(x, y):
    return (1.5 - x + x * y) ** 2 + (2.25 - x + x * y ** 2) ** 2 + (2.625 - x + x * y ** 3) ** 2


def _abs(x, y):
    return abs(x) + abs(y)


def _quadratic(x, y):
    return 0.5 * (x ** 2 + 10 * y ** 2)


FUNCTIONS: dict[str, TestFunction] = {f.key: f for f in (
    TestFunction("rosenbrock", "Rosenbrock", "(1 - x)² + 100 (y - x²)²", _rosenbrock,
                 start=(-1.5, 2.0), bounds=((-2.0, 2.0), (-1.0, 3.0)), minimum=(1.0, 1.0), lr=0.1),
    TestFunction("beale", "Beale", "(1.5 - x + xy)² + (2.25 - x + xy²)² + (2.625 - x + xy³)²", _beale,
                 start=(1.0, 1.6), bounds=((-4.5, 4.5), (-4.5, 4.5)), minimum=(3.0, 0.5), lr=0.1),
    TestFunction("abs", "|x| + |y|", "|x| + |y|", _abs,
                 start=(1.5, -1.0), bounds=((-2.0, 2.0), (-2.0, 2.0)), minimum=(0.0, 0.0), lr=0.1,
                 log_contours=False),
    TestFunction("noisy_quadratic", "Noisy quadratic", "(x² + 10 y²) / 2, gradient + N(0, 1) noise",
                 _quadratic, start=(2.0, 1.5), bounds=((-2.5, 2.5), (-2.5, 2.5)), minimum=(0.0, 0.0),
                 lr=0.1, noise=1.0, log_contours=False),
)}


def function(key: str) -> TestFunction:
    if key not in FUNCTIONS:
        raise LabError(f"unknown test function {key!r}; allowed: {', '.join(FUNCTIONS)}", where="playground")
    return FUNCTIONS[key]


@dataclass(frozen=True)
class Trajectory:
    """One optimiser's run: points[k] is (x, y) after k steps, losses[k] = f(points[k]) (noise-free),
    effective_lr[k-1] the per-coordinate step size lr / denominator used at step k."""

    optimiser: str
    points: np.ndarray
    losses: np.ndarray
    effective_lr: np.ndarray
    stopped: str | None = None                    # why the run ended early, if it did

    @property
    def label(self) -> str:
        return OPTIMIZER_LABELS[self.optimiser]


def _check_common(steps: int, lr: float, limit: int, where: str) -> None:
    if not isinstance(steps, (int, np.integer)) or not 1 <= steps <= limit:
        raise LabError(f"steps must be an integer in [1, {limit}], got {steps!r}", where=where)
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise LabError(f"learning rate must be a finite number > 0, got {lr!r}", where=where)


def run_trajectory(function_key: str, optimiser: str, *, start: tuple[float, float] | None = None,
                   steps: int = 300, lr: float | None = None, seed: int = 0,
                   betas: tuple[float, float] = (0.9, 0.999)) -> Trajectory:
    """Run ``optimiser`` (a key of lab.optim.optimizers.OPTIMIZER_CLASSES) on a test function from ``start``."""
    fn = function(function_key)
    lr = fn.lr if lr is None else lr
    _check_common(steps, lr, MAX_STEPS, "playground")
    if optimiser not in OPTIMIZER_CLASSES:
        raise LabError(f"unknown optimiser {optimiser!r}; allowed: {', '.join(OPTIMIZER_CLASSES)}", where="playground")
    start = fn.start if start is None else start
    if len(start) != 2 or not all(math.isfinite(float(v)) for v in start):
        raise LabError(f"start must be two finite numbers (x, y), got {start!r}", where="playground")
    theta = torch.tensor([float(start[0]), float(start[1])], dtype=torch.float64, requires_grad=True)
    opt = make_optimizer(optimiser, [theta], lr=lr, betas=betas)
    gen = torch.Generator().manual_seed(int(seed))
    points, losses, eff = [theta.detach().clone()], [], []
    stopped = None
    for k in range(steps):
        loss = fn.f(theta[0], theta[1])
        losses.append(loss.item())
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if fn.noise:
            theta.grad.add_(torch.randn(2, generator=gen, dtype=torch.float64), alpha=fn.noise)
        try:
            opt.step()
        except NonFiniteGradient:
            stopped = f"stopped at step {k + 1}: the gradient overflowed (try a smaller learning rate)"
            break
        points.append(theta.detach().clone())
        eff.append(opt.effective_lr()[0].clone())
        if not torch.isfinite(theta).all():
            stopped = f"stopped at step {k + 1}: the point left the floating-point range"
            break
    with torch.no_grad():
        last = fn.f(points[-1][0], points[-1][1]).item()
    losses = losses[:len(points) - 1] + [last]
    return Trajectory(optimiser, torch.stack(points).numpy(), np.asarray(losses),
                      torch.stack(eff).numpy() if eff else np.zeros((0, 2)), stopped)


def run_playground(function_key: str, optimisers: tuple[str, ...] = OPTIMIZERS, *,
                   start: tuple[float, float] | None = None, steps: int = 300, lr: float | None = None,
                   seed: int = 0) -> dict[str, Trajectory]:
    """The same run (same start, steps, lr and noise seed) for each optimiser."""
    if not optimisers:
        raise LabError("pick at least one optimiser", where="playground")
    return {o: run_trajectory(function_key, o, start=start, steps=steps, lr=lr, seed=seed) for o in optimisers}


def contour_grid(function_key: str, n: int = 121) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xs, ys, z) on an n x n grid over the function's bounds; z = log10(1 + f) for functions with
    ``log_contours`` (f >= 0 there), else f."""
    fn = function(function_key)
    (x0, x1), (y0, y1) = fn.bounds
    xs, ys = np.linspace(x0, x1, n), np.linspace(y0, y1, n)
    gx, gy = np.meshgrid(xs, ys)
    z = fn.f(gx, gy)
    return xs, ys, np.log10(1 + z) if fn.log_contours else z


def effective_lr_growth(traj: Trajectory) -> float:
    """The largest factor by which the effective step (either coordinate) rose above its smallest
    earlier value during the run: 1.0 if it never grew."""
    e = traj.effective_lr
    if len(e) < 2:
        return 1.0
    running_min = np.minimum.accumulate(e, axis=0)
    return float(max(1.0, np.max(e[1:] / running_min[:-1])))


def summary_table(trajs: dict[str, Trajectory], function_key: str) -> list[dict]:
    """One row per optimiser: where it ended, the loss there, how far from the minimum."""
    fn = function(function_key)
    rows = []
    for key, tr in trajs.items():
        x, y = tr.points[-1]
        rows.append({
            "optimiser": tr.label,
            "steps run (count)": len(tr.points) - 1,
            "final x (dimensionless)": float(x),
            "final y (dimensionless)": float(y),
            "final f (dimensionless)": float(tr.losses[-1]),
            "distance to minimum (dimensionless)": float(math.hypot(x - fn.minimum[0], y - fn.minimum[1])),
            "effective step growth (ratio)": effective_lr_growth(tr),
            "note": tr.stopped or "",
        })
    return rows


def describe_playground(trajs: dict[str, Trajectory]) -> str:
    """What the run shows, computed from it."""
    if not trajs:
        return ""
    best = min(trajs.values(), key=lambda tr: tr.losses[-1])
    text = (f"Lowest final loss in this run: {best.label} (f = {best.losses[-1]:.3g} after "
            f"{len(best.points) - 1} steps). ")
    growth = {tr.label: effective_lr_growth(tr) for tr in trajs.values()}
    grew = [f"{k} (x{v:.3g})" for k, v in growth.items() if v > 1.0 + 1e-12]
    flat = [k for k, v in growth.items() if v <= 1.0 + 1e-12]
    if grew:
        text += "The effective step rose above an earlier value for " + ", ".join(grew) + ". "
    if flat:
        text += "It never rose for " + ", ".join(flat) + "."
    return text.strip()


# --------------------------------------------------------------------------------------------
# The AMSGrad paper's counterexample (Reddi, Kale and Kumar, ICLR 2018, section 5)
# --------------------------------------------------------------------------------------------

PERIOD = 101
BIG, SMALL = 1010.0, -10.0
COUNTEREXAMPLE_BETAS = (0.9, 0.99)
SCHEDULES = ("1/sqrt(t)", "constant")


def counterexample_gradient(t: int) -> float:
    """The slope of f_t(x): 1010 when t mod 101 = 1, -10 otherwise (t = 1, 2, ...)."""
    return BIG if t % PERIOD == 1 else SMALL


@dataclass(frozen=True)
class CounterexampleRun:
    """x[name][t-1] is x after step t (projected onto [-1, 1]); avg_regret[name][t-1] is R_t / t with
    R_t = sum_{k<=t} f_k(x_{k-1}) - f_k(-1), x_{k-1} the point f_k was evaluated at."""

    steps: int
    lr: float
    schedule: str
    x: dict[str, np.ndarray] = field(default_factory=dict)
    avg_regret: dict[str, np.ndarray] = field(default_factory=dict)

    def period_mean(self, name: str, back: int = 0) -> float:
        """Mean of x over the last full period (back=1: the one before)."""
        xs = self.x[name]
        end = len(xs) - back * PERIOD
        return float(xs[max(0, end - PERIOD):end].mean())


def run_counterexample(optimisers: tuple[str, ...] = COMPARED_OPTIMIZERS, *,
                       steps: int = 5050, lr: float = 1.0, schedule: str = "1/sqrt(t)",
                       x0: float = 0.0, method: str = "vectorised") -> CounterexampleRun:
    """Run each optimiser on the online problem f_t(x) = g_t x over [-1, 1] (b1 = 0.9, b2 = 0.99, the
    optimisers' default eps, no weight decay), projecting x back onto [-1, 1] after every step.
    Step size lr / sqrt(t) (as in the paper) or constant lr.

    ``method="optimiser"`` steps the lab's optimiser object once per t, which is slow for the
    paper's long horizons. ``method="vectorised"`` (the default) uses that the gradient g_t does not depend on x:
    the moments are then the same linear recursions for any x, computed for all t at once
    (scipy.signal.lfilter, np.maximum.accumulate), and only the projection runs step by step.
    The two agree to rounding (tests/optim/test_optim.py checks them against each other).
    """
    _check_common(steps, lr, MAX_COUNTEREXAMPLE_STEPS, "counterexample")
    if schedule not in SCHEDULES:
        raise LabError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}", where="counterexample")
    if not -1 <= x0 <= 1:
        raise LabError(f"x0 must be in [-1, 1], got {x0!r}", where="counterexample")
    if method not in ("vectorised", "optimiser"):
        raise LabError(f"method must be 'vectorised' or 'optimiser', got {method!r}", where="counterexample")
    for name in optimisers:
        if name not in OPTIMIZER_CLASSES:
            raise LabError(f"unknown optimiser {name!r}; allowed: {', '.join(OPTIMIZER_CLASSES)}", where="counterexample")
    t = np.arange(1, steps + 1)
    g = np.where(t % PERIOD == 1, BIG, SMALL)
    lrs = lr / np.sqrt(t) if schedule == "1/sqrt(t)" else np.full(steps, float(lr))
    run = CounterexampleRun(steps, lr, schedule)
    for name in optimisers:
        if method == "optimiser":
            out = _counterexample_by_optimiser(name, g, lrs, x0)
        else:
            out = _project(_counterexample_updates(name, g, lrs), x0)
        before = np.concatenate([[x0], out[:-1]])
        run.x[name] = out
        run.avg_regret[name] = np.cumsum(g * before - g * -1.0) / t
    return run


def _counterexample_by_optimiser(name: str, g: np.ndarray, lrs: np.ndarray, x0: float) -> np.ndarray:
    x = torch.tensor([float(x0)], dtype=torch.float64, requires_grad=True)
    opt = make_optimizer(name, [x], lr=float(lrs[0]), betas=COUNTEREXAMPLE_BETAS)
    group = opt.param_groups[0]
    x.grad = grad = torch.zeros(1, dtype=torch.float64)
    out = np.empty(len(g))
    for k in range(len(g)):
        grad[0] = g[k]
        group["lr"] = float(lrs[k])
        opt.step()
        x.data.clamp_(-1.0, 1.0)
        out[k] = x.data[0]
    return out


def _default_eps(name: str) -> float:
    return inspect.signature(OPTIMIZER_CLASSES[name]).parameters["eps"].default


def _counterexample_updates(name: str, g: np.ndarray, lrs: np.ndarray) -> np.ndarray:
    """u_t, the step x_{t-1} - x_t before projection, for all t at once (the update of lab.optim.optimizers)."""
    b1, b2 = COUNTEREXAMPLE_BETAS
    eps = _default_eps(name)
    t = np.arange(1, len(g) + 1)
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    m = lfilter([1 - b1], [1, -b1], g)
    if name == "adam":
        denom = np.sqrt(lfilter([1 - b2], [1, -b2], g * g)) / np.sqrt(bc2) + eps
    else:
        s = lfilter([1.0], [1, -b2], (1 - b2) * (g - m) ** 2 + eps)
        mode = OPTIMIZER_CLASSES[name]([torch.zeros(1)]).defaults.get("max_mode")
        if mode == "raw":
            denom = np.sqrt(np.maximum.accumulate(s)) / np.sqrt(bc2) + eps
        elif mode == "corrected":
            denom = np.sqrt(np.maximum.accumulate(s / bc2)) + eps
        else:
            denom = np.sqrt(s) / np.sqrt(bc2) + eps
    return lrs * (m / bc1) / denom


def _project(updates: np.ndarray, x0: float) -> np.ndarray:
    out, x = [], float(x0)
    for u in updates.tolist():
        x = min(1.0, max(-1.0, x - u))
        out.append(x)
    return np.asarray(out)


def describe_counterexample(run: CounterexampleRun) -> str:
    """A sentence about what the run shows, computed from it (nothing here is assumed)."""
    parts, wrong, right = [], [], []
    for name in run.x:
        now, before = run.period_mean(name), run.period_mean(name, back=1)
        label = OPTIMIZER_LABELS[name]
        if now >= 0.9:
            where = "sits near x = +1, the worst point"
            wrong.append(label)
        elif now <= -0.9:
            where = "sits near the optimum x = -1"
            right.append(label)
        else:
            trend = ("moving towards -1" if now < before - 1e-3 else
                     "moving towards +1" if now > before + 1e-3 else "not moving")
            where = f"is at x = {now:+.2f} on average ({trend})"
            if now < 0:
                right.append(label)
            elif now > 0:
                wrong.append(label)
        parts.append(f"{label} {where}")
    lr_text = f"lr_t = {run.lr:g}/√t" if run.schedule == "1/sqrt(t)" else f"constant lr = {run.lr:g}"
    text = f"After {run.steps} steps ({lr_text}, mean of x over the last {PERIOD} steps): " + "; ".join(parts) + "."
    if wrong and right:
        text += (f" So on this problem {', '.join(wrong)} {'heads' if len(wrong) == 1 else 'head'} the wrong way "
                 f"while {', '.join(right)} {'goes' if len(right) == 1 else 'go'} towards the optimum.")
    elif wrong:
        text += " None of them heads for the optimum in this run; try more steps or another step size."
    elif right:
        text += " All of them head for the optimum in this run (Adam's failure needs the step size to be large enough)."
    return text
