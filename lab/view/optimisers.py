"""The Optimisers page's model: Adam, AdaBelief and Max-AdaBelief on 2-D functions (the playground) and on
Reddi, Kale and Kumar's online counterexample, every chart a real run of the lab's optimisers."""

from __future__ import annotations

from functools import lru_cache

from lab.optim.playground import (contour_grid, describe_counterexample, describe_playground, function,
                                  run_counterexample, run_playground, summary_table)
from lab.scenario.names import OPTIMIZER_LABELS
from lab.view.section import Notice, Section

INTRO = ("Adam, AdaBelief (an Adam that scales each step by how far the gradient strays from its running average) and "
         "the CXL design's Max-AdaBelief (an AdaBelief whose denominator never shrinks), run by the lab's own "
         "optimisers (`lab.optim.optimizers`, checked against `torch.optim.Adam` and the published "
         "`adabelief-pytorch`). Every chart here is a real run on an analytic function, so it is labelled {measured}: "
         "nothing is modelled.")
PLAYGROUND_FORM = (("pg_fn", "pg_opts"), ("pg_steps", "pg_lr", "pg_seed"), ("pg_own_start", "pg_x0", "pg_y0"))
COUNTEREXAMPLE_FORM = (("ce_schedule", "ce_lr", "ce_steps"), ("ce_opts",))
COUNTEREXAMPLE_INTRO = (
    "Reddi, Kale and Kumar (*On the convergence of Adam and beyond*, ICLR 2018) give an online problem on "
    "[−1, 1]: at step t the loss is f_t(x) = 1010x when t mod 101 = 1 and −10x otherwise, b1 = 0.9, "
    "b2 = 0.99, and x is projected back onto [−1, 1] after every step. Over every 101 steps the slopes add "
    "up to +10, so the best point is **x = −1**. The one large gradient inflates the second moment, which "
    "then decays (b2 = 0.99) while a hundred small gradients push x the other way.")
BELIEF = (
    "**The belief term.** Adam divides each step by the root of a running mean of g², the size of "
    "the gradient. AdaBelief divides by the root of a running mean of (g − m)², how far the gradient "
    "is from what the momentum m forecast. Where gradients are large but steady (a long curved valley) "
    "that surprise is small and AdaBelief steps boldly; where they jump (noise, the kink of |x| + |y|) "
    "it is large and AdaBelief steps carefully.")
THE_MAX = (
    "**The max.** Max-AdaBelief keeps the largest belief value seen so far in the denominator, so one "
    "big surprise keeps later steps small (the AMSGrad idea). The CXL design's version takes the max of the "
    "raw s, which is then divided by 1 − b2ᵗ; that factor grows towards 1 over the first ~1/(1 − b2) "
    "steps, so its effective step can still grow. Taking the max of the bias-corrected ŝ (dotted) gives "
    "an effective step that never grows, at a price: one early large surprise caps every later step, "
    "so it can crawl. The table's effective-step column measures the growth.")
WHAT_TO_LOOK_FOR = (
    "**What to look for.** Without a max, the denominator forgets the rare large gradient within about "
    "1/(1 − b2) = 100 steps, so the hundred small gradients that follow are divided by a small number and "
    "take large steps towards +1. With the max, the denominator keeps the memory of the large gradient, "
    "the small gradients' steps stay small, and the net pull of each period (+10, towards −1) can win. "
    "The belief term sees the same spike: at the large gradient g − m_t = b1 (g − m_(t−1)) ≈ 0.9 × 1020, "
    "so AdaBelief's s rises and decays much like Adam's v.")


@lru_cache(maxsize=32)
def _playground(fn: str, opts: tuple, start: tuple, steps: int, lr: float, seed: int):
    return run_playground(fn, opts, start=start, steps=steps, lr=lr, seed=seed)


@lru_cache(maxsize=16)
def _grid(fn: str):
    return contour_grid(fn, n=241)


@lru_cache(maxsize=16)
def _counterexample(opts: tuple, steps: int, lr: float, schedule: str):
    return run_counterexample(opts, steps=steps, lr=lr, schedule=schedule)


def playground(v: dict) -> list[Section]:
    """The playground's sections for the form's values ``v`` (keys of the view table)."""
    fn = function(v["pg_fn"])
    lr, steps = float(v["pg_lr"]), int(v["pg_steps"])
    start = (float(v["pg_x0"]), float(v["pg_y0"])) if v["pg_own_start"] else fn.start
    trajs = _playground(v["pg_fn"], tuple(v["pg_opts"]), start, steps, lr, int(v["pg_seed"]))
    labels = {k: tr.label for k, tr in trajs.items()}
    xs, ys, z = _grid(v["pg_fn"])
    at = f"({start[0]:g}, {start[1]:g})"
    losses = {k: tr.losses for k, tr in trajs.items()}
    return [
        Section("pg_traj", chart="optim.trajectory_figure", kind="measured", chart_input=dict(
            xs=xs, ys=ys, z=z, paths={k: tr.points for k, tr in trajs.items()}, labels=labels, minimum=fn.minimum,
            z_title="log10(1 + f)" if fn.log_contours else "f (dimensionless)",
            title=f"{fn.label}: f(x, y) = {fn.formula}, start {at}, lr {lr:g}"),
            caption=f"Paths computed by running the lab's optimisers for {steps} steps in float64 from {at} with "
                    f"lr = {lr:g}, betas (0.9, 0.999) and each optimiser's default eps; press ▶ to animate. The "
                    "gold star is the minimum.",
            text=describe_playground(trajs),
            notices=tuple(Notice(f"{tr.label}: {tr.stopped}", "warning") for tr in trajs.values() if tr.stopped)),
        Section("pg_loss", side="left", chart="optim.loss_figure", kind="measured", chart_input=dict(
            losses=losses, labels=labels, log_y=bool(min(x.min() for x in losses.values()) > 0)),
            caption="Loss f (without the gradient noise) against step, same runs.", text=BELIEF),
        Section("pg_eff", side="right", chart="optim.effective_lr_figure", kind="measured", chart_input=dict(
            effective={k: tr.effective_lr for k, tr in trajs.items()}, labels=labels),
            caption="Effective step on x: lr divided by the denominator each optimiser used at that step "
                    "(optimizer.effective_lr()), same runs.", text=THE_MAX),
        Section("pg_summary", table=summary_table(trajs, v["pg_fn"]), kind="measured",
                caption="Where each run ended. Effective step growth: the largest factor by which lr / denominator "
                        "rose above its smallest earlier value (1 = never grew)."),
    ]


def counterexample(v: dict) -> list[Section]:
    """The counterexample's sections for the form's values ``v``."""
    run = _counterexample(tuple(v["ce_opts"]), int(v["ce_steps"]), float(v["ce_lr"]), v["ce_schedule"])
    labels = {k: OPTIMIZER_LABELS[k] for k in run.x}
    return [
        Section("ce_x", chart="optim.counterexample_figure", chart_input=dict(xs=run.x, labels=labels),
                kind="measured",
                caption=f"x after each of {run.steps} steps. Computed from the optimisers' update vectorised over "
                        "time: the gradient does not depend on x, so the moments are computed for all t at once and "
                        "only the projection runs step by step (tests check this equals stepping lab.optim.optimizers's "
                        "optimisers to rounding; tests/optim/test_optim.py holds them to 1e-12). The default, lr/√t "
                        "with 50,500 steps (500 periods), shows the effect in well under a second; long lines are "
                        "thinned to each bucket's min and max.",
                notices=(Notice(describe_counterexample(run), "info", ":material/insights:"),),
                text=WHAT_TO_LOOK_FOR),
        Section("ce_regret", chart="optim.regret_figure", chart_input=dict(avg_regret=run.avg_regret, labels=labels),
                kind="measured",
                caption="Average regret R_t / t = (1/t) Σ f_k(x_(k−1)) − f_k(−1), same runs: it tends to 0 only "
                        "for a method that converges to the optimum."),
    ]


__all__ = ["INTRO", "PLAYGROUND_FORM", "COUNTEREXAMPLE_FORM", "COUNTEREXAMPLE_INTRO", "playground",
           "counterexample"]
