"""Adam, AdaBelief and Max-AdaBelief as ``torch.optim.Optimizer`` subclasses, with the CXL design's
optimizer-state all-reduce.

The maths (one step, for a parameter theta with gradient g, step number t = 1, 2, ...)
-------------------------------------------------------------------------------------
Adam::

    m_t = b1 m + (1-b1) g            v_t = b2 v + (1-b2) g^2
    m_hat = m_t / (1-b1^t)           v_hat = v_t / (1-b2^t)
    theta -= lr * m_hat / (sqrt(v_hat) + eps)

AdaBelief (the official update with rectification off)::

    m_t = b1 m + (1-b1) g
    s_t = b2 s + (1-b2) (g - m_t)^2 + eps       # the "belief": how far g is from its forecast m_t
    theta -= lr * m_hat / (sqrt(s_t / (1-b2^t)) + eps)

Note that eps appears twice, as in the paper and in ``adabelief-pytorch``: it is added to the stored
s_t at every step (so in steady state s carries eps / (1-b2)) and again outside the square root.

Max-AdaBelief (the CXL design's variant, the AMSGrad idea applied to AdaBelief) keeps a running
maximum and uses it in the denominator. Two variants, both offered:

* ``max_mode="raw"`` (:class:`MaxAdaBelief`, the default, what the CXL design and ``adabelief-pytorch``'s
  ``amsgrad=True`` do): ``s_max_t = max(s_max_{t-1}, s_t)``, denominator
  ``sqrt(s_max_t / (1-b2^t)) + eps``. Because 1-b2^t grows towards 1, the effective step
  ``lr / denominator`` can still *grow* during the first ~1/(1-b2) steps (by up to 1/sqrt(1-b2)).
* ``max_mode="corrected"`` (:class:`MaxAdaBeliefCorrected`): the maximum of the bias-corrected value,
  ``s_hat_max_t = max(s_hat_max_{t-1}, s_t / (1-b2^t))``, denominator ``sqrt(s_hat_max_t) + eps``.
  This is the only variant whose effective step ``lr / denominator`` never grows.

Shape
-----
Like ``torch/optim/adam.py``: the maths lives in plain functions over lists of tensors
(:func:`adam_update`, :func:`adabelief_update`) built from ``torch._foreach_*`` ops; the classes hold
hyper-parameters and state and call them. State keys follow torch and ``adabelief-pytorch``
(``step`` as a float32 tensor, ``exp_avg``, ``exp_avg_sq`` / ``exp_avg_var``, ``max_exp_avg_var``
for the raw max and ``max_exp_avg_var_hat`` for the corrected max), so a ``torch.optim.Adam`` state
dict loads into :class:`Adam` and back.

Distributed steps
-----------------
``opt.step_distributed(allreduce_fn, reduce="state")`` (the same as ``opt.step(allreduce_fn=..., reduce=...)``)
combines workers through a caller-supplied all-reduce::

    allreduce_fn(tensor, op) -> None

``tensor`` is a 1-D contiguous tensor; the function must replace its contents, in place, with the
element-wise reduction over all workers; ``op`` is ``"mean"``, ``"max"`` or ``"sum"``. Every worker
must call the step at the same time with gradients for the same parameters (the calls are
collective: one call per (device, dtype) bucket, in the same order on every worker).
:func:`torch_allreduce_fn` builds one over ``torch.distributed``; :class:`LocalAllReduce` simulates
several workers as threads of one process (tests, notebooks).

* ``reduce="state"`` (the CXL design's "optimizer-state all-reduce"): each worker updates its own
  m_t and s_t from its local gradient; the workers all-reduce (mean) the bias-corrected first moment
  m_hat; each takes the max of s_t with its previous maximum and the workers all-reduce (max) that
  (it is stored as the new maximum, so every worker holds the same maximum afterwards); then every
  worker applies the update with the combined values. Starting from identical parameters, every
  worker ends with identical parameters. For optimisers without a max (Adam, AdaBelief) the
  bias-corrected second moment is all-reduced with "mean" and used only for this update. The local
  m and s stay local (they differ between workers).
* ``reduce="gradient"`` (the usual form): all-reduce (mean) the gradients in place (``p.grad`` holds the
  mean afterwards), then the ordinary local step, identical on every worker.

Errors
------
Bad hyper-parameters (negative lr or eps, betas outside [0, 1), negative weight decay, unknown
max_mode) raise :class:`lab.errors.LabError`, at construction and again at each step (a scheduler may
change them). A NaN or infinite gradient raises :class:`NonFiniteGradient` (a LabError) naming the
parameter group and index; the step is then skipped and parameters and state are unchanged
(``check_finite=False`` turns the check off; it costs about one read of the gradients). In a
distributed step every worker raises together (the check is agreed through one extra 1-element
all-reduce in ``reduce="state"``; in ``reduce="gradient"`` the averaged gradient is checked).
"""

from __future__ import annotations

import math
import numbers
from enum import StrEnum
from typing import Any, Iterable

import torch
from torch import Tensor

from lab.errors import LabError
from lab.optim.distributed import (
    ALLREDUCE_OPS,
    AllReduceFn,
    LocalAllReduce,
    allreduce_tensors,
    torch_allreduce_fn,
)
from lab.optim import fused
from lab.optim.functional import MAX_MODES, adabelief_update, adam_update
from lab.scenario.names import OPTIMIZER_LABELS

__all__ = [
    "ALLREDUCE_OPS", "MAX_MODES", "OPTIMIZER_CLASSES", "OPTIMIZER_LABELS", "AllReduceFn", "Adam", "AdaBelief",
    "MaxAdaBelief", "MaxAdaBeliefCorrected", "NonFiniteGradient", "LocalAllReduce", "adam_update",
    "adabelief_update", "allreduce_tensors", "make_optimizer", "torch_allreduce_fn",
]

#: What a distributed step all-reduces: the optimiser's state, or the gradient before a local step.
class Reduce(StrEnum):
    """What a distributed step all-reduces: the optimiser's state, or the gradients."""

    STATE = "state"
    GRADIENT = "gradient"


class NonFiniteGradient(LabError):
    """A gradient held NaN or +-inf; the step was skipped (parameters and state unchanged)."""

    def __init__(self, message: str, *, group: int | None = None, index: int | None = None,
                 where: str | None = None):
        self.group = group
        self.index = index
        super().__init__(message, where=where)


# --------------------------------------------------------------------------------------------
# Hyper-parameter checks
# --------------------------------------------------------------------------------------------

def _is_number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _check_group(group: dict, where: str) -> None:
    lr, betas, eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
    if not _is_number(lr) or not math.isfinite(lr) or lr < 0:
        raise LabError(f"learning rate lr must be a finite number >= 0, got {lr!r}", where=where)
    if (not isinstance(betas, (tuple, list)) or len(betas) != 2
            or not all(_is_number(b) and 0.0 <= b < 1.0 for b in betas)):
        raise LabError(f"betas must be a pair (beta1, beta2) of numbers in [0, 1), got {betas!r}", where=where)
    if not _is_number(eps) or not math.isfinite(eps) or eps < 0:
        raise LabError(f"eps must be a finite number >= 0, got {eps!r}", where=where)
    if not _is_number(wd) or not math.isfinite(wd) or wd < 0:
        raise LabError(f"weight_decay must be a finite number >= 0, got {wd!r}", where=where)
    if group.get("max_mode") not in MAX_MODES:
        raise LabError(f"max_mode must be None, 'raw' or 'corrected', got {group.get('max_mode')!r}",
                       where=where)
    if group.get("fused") and not fused.available():
        raise LabError("the fused optimisers are compiled by torch.compile, which needs a C++ compiler (g++); none "
                       "is installed here. Install g++ or turn the fused optimiser off", where=where)


def _nonfinite_index(grads: list[Tensor]) -> tuple[int, str] | None:
    """(index, "NaN" or "infinite values") of the first non-finite gradient, or None.

    A cheap screen first: the sum of a tensor is NaN or infinite whenever one element is (it can
    also overflow for huge finite values, which the exact check below then clears)."""
    if not grads:
        return None
    if len(grads) <= 4:
        if all(math.isfinite(g.sum().item()) for g in grads):
            return None
    elif bool(torch.isfinite(torch.stack([g.sum() for g in grads])).all()):
        return None
    for i, g in enumerate(grads):
        if bool(torch.isnan(g).any()):
            return i, "NaN"
        if not bool(torch.isfinite(g).all()):
            return i, "infinite values"
    return None


# --------------------------------------------------------------------------------------------
# The optimisers
# --------------------------------------------------------------------------------------------

class _LabOptimizer(torch.optim.Optimizer):
    """Shared plumbing: validation, state creation, finite checks, local and distributed steps."""

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        _check_group(self.param_groups[-1], f"{type(self).__name__}, parameter group {len(self.param_groups) - 1}")

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's load, then any hyper-parameter the saved groups lack is taken from this
        optimiser's defaults (e.g. a torch.optim.Adam state dict has no check_finite)."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            for key, value in self.defaults.items():
                group.setdefault(key, value)

    # -- subclass hooks -------------------------------------------------------------------
    def _new_state(self, p: Tensor, group: dict) -> dict:
        raise NotImplementedError

    def _update(self, group: dict, params, grads, states, steps, allreduce_fn) -> None:
        raise NotImplementedError

    def _denominator(self, group: dict, state: dict) -> Tensor:
        raise NotImplementedError

    # -- steps ----------------------------------------------------------------------------
    def step(self, closure=None, *, allreduce_fn: AllReduceFn | None = None, reduce: str = Reduce.STATE):
        """One step. ``closure`` re-evaluates the model and returns the loss (it is called with
        gradients enabled). With ``allreduce_fn`` the step is distributed (see the module docstring)."""
        if allreduce_fn is not None and reduce not in tuple(Reduce):
            raise LabError(f"reduce must be 'state' or 'gradient', got {reduce!r}", where=type(self).__name__)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            gathered = self._gather()
            if allreduce_fn is not None and reduce == Reduce.GRADIENT:
                allreduce_tensors([g for _, ps, gs in gathered for g in gs], "mean", allreduce_fn)
                self._raise_if_nonfinite(gathered, after="after the gradient all-reduce")
                self._apply(gathered, None)
            elif allreduce_fn is not None:
                bad = self._find_nonfinite(gathered)
                flag = torch.tensor([0.0 if bad is None else 1.0], dtype=torch.float64)
                allreduce_fn(flag, "max")                     # every worker learns about a bad gradient
                if bad is not None:
                    raise bad
                if flag.item() > 0:
                    raise NonFiniteGradient(
                        "a gradient on another worker held NaN or infinite values; every worker "
                        "skipped this step (parameters and state unchanged)", where=type(self).__name__)
                self._apply(gathered, allreduce_fn)
            else:
                self._raise_if_nonfinite(gathered)
                self._apply(gathered, None)
        return loss

    def step_distributed(self, allreduce_fn: AllReduceFn, reduce: str = Reduce.STATE, closure=None):
        """A collective step: ``reduce="state"`` (the CXL design's optimizer-state all-reduce) or
        ``reduce="gradient"`` (all-reduce the gradients, then the local step). See the module docstring."""
        if not callable(allreduce_fn):
            raise LabError("allreduce_fn must be a function (tensor, op) -> None", where=type(self).__name__)
        return self.step(closure, allreduce_fn=allreduce_fn, reduce=reduce)

    def _gather(self) -> list[tuple[int, list[tuple[int, Tensor]], list[Tensor]]]:
        """Per group: (group index, [(index in group, param)], [grad]) for params with a gradient."""
        out = []
        for gi, group in enumerate(self.param_groups):
            _check_group(group, f"{type(self).__name__}, parameter group {gi}")
            ps, gs = [], []
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise LabError(f"parameter {pi} has a sparse gradient; only dense gradients are supported",
                                   where=f"{type(self).__name__}, parameter group {gi}")
                if torch.is_complex(p):
                    raise LabError(f"parameter {pi} is complex; only real parameters are supported",
                                   where=f"{type(self).__name__}, parameter group {gi}")
                ps.append((pi, p))
                gs.append(p.grad)
            out.append((gi, ps, gs))
        return out

    def _find_nonfinite(self, gathered, after: str = "") -> NonFiniteGradient | None:
        for gi, ps, gs in gathered:
            if not self.param_groups[gi].get("check_finite", True):
                continue
            hit = _nonfinite_index(gs)
            if hit is not None:
                i, kind = hit
                pi, p = ps[i]
                suffix = f" {after}" if after else ""
                return NonFiniteGradient(
                    f"the gradient of parameter group {gi}, parameter {pi} (shape {list(p.shape)}, "
                    f"{str(p.dtype).replace('torch.', '')}) holds {kind}{suffix}; the step was skipped "
                    "(parameters and state unchanged). Lower the learning rate or check the loss.",
                    group=gi, index=pi, where=type(self).__name__)
        return None

    def _raise_if_nonfinite(self, gathered, after: str = "") -> None:
        bad = self._find_nonfinite(gathered, after)
        if bad is not None:
            raise bad

    def _apply(self, gathered, allreduce_fn) -> None:
        for gi, ps, gs in gathered:
            if not ps:
                continue
            group = self.param_groups[gi]
            params = [p for _, p in ps]
            states, fresh = [], []
            for p in params:
                state = self.state[p]
                if len(state) == 0:
                    state.update(self._new_state(p, group))
                    fresh.append(state)
                elif not isinstance(state["step"], Tensor):   # e.g. a state dict from adabelief-pytorch
                    state["step"] = torch.tensor(float(state["step"]), dtype=torch.float32)
                states.append(state)
            if group.get("fused") and len(fresh) == len(states) and fused.span(params) is not None:
                # parameters back to back in one buffer (a training job's): states likewise, one kernel call a step
                fused.pack(states, [k for k, v in states[0].items() if k != "step" and isinstance(v, Tensor)])
            step_ts = [s["step"] for s in states]
            torch._foreach_add_(step_ts, 1)
            steps = [int(t.item()) for t in step_ts]
            self._update(group, params, gs, states, steps, allreduce_fn)

    # -- inspection -----------------------------------------------------------------------
    def effective_lr(self) -> list[Tensor]:
        """lr / denominator for every parameter that has state, in parameter order: the
        element-wise step size that multiplied m_hat at the last step."""
        out = []
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state.get(p)
                    if state:
                        out.append(group["lr"] / self._denominator(group, state))
        return out


def _step_count(state: dict) -> int:
    return int(state["step"].item()) if isinstance(state["step"], Tensor) else int(state["step"])


def _zeros(p: Tensor) -> Tensor:
    return torch.zeros_like(p, memory_format=torch.preserve_format)


class Adam(_LabOptimizer):
    """Adam: the same numbers as ``torch.optim.Adam`` with the same arguments.

    ``weight_decay`` is the L2 penalty added to the gradient (torch's default); with
    ``decoupled_weight_decay=True`` it is AdamW's decoupled decay (as torch's argument of that name).
    ``check_finite`` (default True) turns the NaN/inf gradient check on or off.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, *, decoupled_weight_decay: bool = False,
                 check_finite: bool = True, fused: bool = False):
        defaults = dict(lr=lr, betas=_as_betas(betas), eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=decoupled_weight_decay, check_finite=check_finite, fused=fused)
        super().__init__(params, defaults)

    def _new_state(self, p, group):
        return {"step": torch.tensor(0.0, dtype=torch.float32), "exp_avg": _zeros(p), "exp_avg_sq": _zeros(p)}

    def _update(self, group, params, grads, states, steps, allreduce_fn):
        beta1, beta2 = group["betas"]
        if group.get("fused") and allreduce_fn is None:
            fused.adam_update(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], steps,
                              lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                              weight_decay=group["weight_decay"],
                              decoupled_weight_decay=group.get("decoupled_weight_decay", False))
            return
        adam_update(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], steps,
                    lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    decoupled_weight_decay=group.get("decoupled_weight_decay", False), allreduce_fn=allreduce_fn)

    def _denominator(self, group, state):
        bc2 = 1 - group["betas"][1] ** _step_count(state)
        return state["exp_avg_sq"].sqrt() / math.sqrt(bc2) + group["eps"]


_MAX_KEYS = {"raw": "max_exp_avg_var", "corrected": "max_exp_avg_var_hat"}


class _AdaBeliefFamily(_LabOptimizer):
    """AdaBelief and Max-AdaBelief: one class body, the max_mode hyper-parameter picks the variant."""

    def __init__(self, params: Iterable, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, decoupled_weight_decay: bool, check_finite: bool, max_mode: str | None,
                 fused: bool = False):
        if max_mode not in MAX_MODES:
            raise LabError(f"max_mode must be None, 'raw' or 'corrected', got {max_mode!r}",
                           where=type(self).__name__)
        defaults = dict(lr=lr, betas=_as_betas(betas), eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=decoupled_weight_decay, max_mode=max_mode,
                        check_finite=check_finite, fused=fused)
        super().__init__(params, defaults)

    def _new_state(self, p, group):
        state = {"step": torch.tensor(0.0, dtype=torch.float32), "exp_avg": _zeros(p), "exp_avg_var": _zeros(p)}
        mode = group.get("max_mode")
        if mode is not None:
            state[_MAX_KEYS[mode]] = _zeros(p)
        return state

    def _update(self, group, params, grads, states, steps, allreduce_fn):
        beta1, beta2 = group["betas"]
        mode = group.get("max_mode")
        if mode is not None:
            key = _MAX_KEYS[mode]
            for p, s in zip(params, states):                 # max_mode changed after the state was made
                if key not in s:
                    s[key] = _zeros(p)
        update = fused.adabelief_update if group.get("fused") and allreduce_fn is None else adabelief_update
        extra = {} if update is fused.adabelief_update else {"allreduce_fn": allreduce_fn}
        update(params, grads, [s["exp_avg"] for s in states], [s["exp_avg_var"] for s in states],
               None if mode is None else [s[_MAX_KEYS[mode]] for s in states], steps,
               lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"],
               decoupled_weight_decay=group.get("decoupled_weight_decay", True), max_mode=mode, **extra)

    def _denominator(self, group, state):
        bc2 = 1 - group["betas"][1] ** _step_count(state)
        mode = group.get("max_mode")
        if mode == "corrected":
            return state["max_exp_avg_var_hat"].sqrt() + group["eps"]
        s = state["max_exp_avg_var"] if mode == "raw" else state["exp_avg_var"]
        return s.sqrt() / math.sqrt(bc2) + group["eps"]


class AdaBelief(_AdaBeliefFamily):
    """AdaBelief with rectification off (see the module docstring for the update).

    ``decoupled_weight_decay=True`` matches ``adabelief-pytorch``'s ``weight_decouple=True,
    fixed_decay=False``; False matches ``weight_decouple=False`` (L2 added to the gradient, but unlike
    that package the gradient tensor itself is not modified). ``check_finite`` (default True) turns
    the NaN/inf gradient check on or off.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-16, weight_decay: float = 0, decoupled_weight_decay: bool = True, *,
                 check_finite: bool = True, fused: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay, check_finite, None, fused)


class MaxAdaBelief(_AdaBeliefFamily):
    """Max-AdaBelief, the CXL design's variant: s_max_t = max(s_max_{t-1}, s_t) in the denominator
    (``max_mode="raw"``, = ``adabelief-pytorch`` with ``amsgrad=True, rectify=False``). Pass
    ``max_mode="corrected"`` (or use :class:`MaxAdaBeliefCorrected`) for the max of the bias-corrected
    value, whose effective step never grows."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-16, weight_decay: float = 0, decoupled_weight_decay: bool = True, *,
                 check_finite: bool = True, max_mode: str = "raw", fused: bool = False):
        if max_mode not in ("raw", "corrected"):
            raise LabError(f"max_mode must be 'raw' or 'corrected', got {max_mode!r}", where=type(self).__name__)
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay, check_finite, max_mode, fused)


class MaxAdaBeliefCorrected(MaxAdaBelief):
    """Max-AdaBelief taking the max of the bias-corrected value s_t / (1-b2^t): the effective step
    lr / (sqrt(s_hat_max) + eps) never grows."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-16, weight_decay: float = 0, decoupled_weight_decay: bool = True, *,
                 check_finite: bool = True, fused: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled_weight_decay,
                         check_finite=check_finite, max_mode="corrected", fused=fused)


def _as_betas(betas):
    return tuple(betas) if isinstance(betas, (list, tuple)) else betas


#: The class behind each name of lab.scenario.names.OPTIMIZERS (the tests check they match).
OPTIMIZER_CLASSES: dict[str, type[_LabOptimizer]] = {
    "adam": Adam,
    "adabelief": AdaBelief,
    "maxadabelief": MaxAdaBelief,
    "maxadabelief-corrected": MaxAdaBeliefCorrected,
}


def make_optimizer(name: str, params: Iterable, **hyper) -> _LabOptimizer:
    """The optimiser called ``name`` (a key of OPTIMIZER_CLASSES) over ``params``."""
    if name not in OPTIMIZER_CLASSES:
        raise LabError(f"unknown optimiser {name!r}; allowed: {', '.join(OPTIMIZER_CLASSES)}", where="optimizer")
    return OPTIMIZER_CLASSES[name](params, **hyper)


def from_training(tr: Any, params: Iterable, lr: float) -> _LabOptimizer:
    """The optimiser of a run's training settings (``optimizer``, ``beta1``, ``beta2``, ``eps``,
    ``weight_decay``, ``fused``) at learning rate ``lr`` (the caller scales it with the number of workers)."""
    return make_optimizer(tr.optimizer, params, lr=lr, betas=(tr.beta1, tr.beta2), eps=tr.eps,
                          weight_decay=tr.weight_decay, fused=tr.fused)
