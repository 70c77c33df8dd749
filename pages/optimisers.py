"""Optimisers: Adam, AdaBelief and Max-AdaBelief on 2-D functions and on the AMSGrad counterexample."""

import pandas as pd
import streamlit as st

import ui
from lab.figures import optim as figs
from lab.scenario.names import OPTIMIZER_LABELS
from lab.view.state import VIEW
from lab.optim.playground import (FUNCTIONS, contour_grid, describe_counterexample, describe_playground, function,
                                  run_counterexample, run_playground, summary_table)

ui.scenario_sidebar()
st.title("Optimisers")
st.markdown(
    "Adam, AdaBelief and the CXL design's Max-AdaBelief, run by the lab's own optimisers "
    "(`lab.optim.optimizers`, checked against `torch.optim.Adam` and the published `adabelief-pytorch`). "
    "Every chart here is a real run on an analytic function, so it is labelled "
    f"{ui.badge('measured')}: nothing is modelled.")


@st.cache_data(show_spinner="Running the optimisers…", max_entries=32)
def playground(fn: str, opts: tuple, start: tuple, steps: int, lr: float, seed: int):
    return run_playground(fn, opts, start=start, steps=steps, lr=lr, seed=seed)


@st.cache_data(max_entries=16)
def grid(fn: str):
    return contour_grid(fn, n=241)


@st.cache_data(show_spinner="Running the counterexample…", max_entries=16)
def counterexample(opts: tuple, steps: int, lr: float, schedule: str):
    return run_counterexample(opts, steps=steps, lr=lr, schedule=schedule)


# ---------------------------------------------------------------- the 2-D playground
st.header("2-D playground")
with st.form("playground"):
    c1, c2 = st.columns([2, 3])
    fn_key = ui.control(c1, "pg_fn", format_func=lambda k: FUNCTIONS[k].label)
    opts = ui.control(c2, "pg_opts")
    c1, c2, c3 = st.columns(3)
    steps = ui.control(c1, "pg_steps")
    lr = ui.control(c2, "pg_lr")
    seed, own_start, x0, y0 = (VIEW[k].spec.default for k in ("pg_seed", "pg_own_start", "pg_x0", "pg_y0"))
    if not ui.lesson_mode():
        seed = ui.control(c3, "pg_seed")
        c1, c2, c3 = st.columns(3)
        own_start = ui.control(c1, "pg_own_start")
        x0 = ui.control(c2, "pg_x0")
        y0 = ui.control(c3, "pg_y0")
    st.form_submit_button("Run", type="primary", key="pg_run")

with ui.guarded("the playground"):
    fn = function(fn_key)
    start = (float(x0), float(y0)) if own_start else fn.start
    trajs = playground(fn_key, tuple(opts), start, int(steps), float(lr), int(seed))
    labels = {k: tr.label for k, tr in trajs.items()}
    xs, ys, z = grid(fn_key)
    st.plotly_chart(figs.trajectory_figure(
        xs, ys, z, {k: tr.points for k, tr in trajs.items()}, labels, minimum=fn.minimum,
        z_title="log10(1 + f)" if fn.log_contours else "f (dimensionless)",
        title=f"{fn.label}: f(x, y) = {fn.formula}, start ({start[0]:g}, {start[1]:g}), lr {lr:g}"),
        key="pg_traj")
    ui.caption("measured", f"Paths computed by running the lab's optimisers for {steps} steps in float64 from "
               f"({start[0]:g}, {start[1]:g}) with lr = {lr:g}, betas (0.9, 0.999) and each optimiser's default "
               "eps; press ▶ to animate. The gold star is the minimum.")
    st.markdown(describe_playground(trajs))
    for tr in trajs.values():
        if tr.stopped:
            st.warning(f"{tr.label}: {tr.stopped}")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figs.loss_figure({k: tr.losses for k, tr in trajs.items()}, labels,
                                         log_y=bool(min(tr.losses.min() for tr in trajs.values()) > 0)),
                        key="pg_loss")
        ui.caption("measured", "Loss f (without the gradient noise) against step, same runs.")
        st.markdown(
            "**The belief term.** Adam divides each step by the root of a running mean of g², the size of "
            "the gradient. AdaBelief divides by the root of a running mean of (g − m)², how far the gradient "
            "is from what the momentum m forecast. Where gradients are large but steady (a long curved valley) "
            "that surprise is small and AdaBelief steps boldly; where they jump (noise, the kink of |x| + |y|) "
            "it is large and AdaBelief steps carefully.")
    with right:
        st.plotly_chart(figs.effective_lr_figure({k: tr.effective_lr for k, tr in trajs.items()}, labels),
                        key="pg_eff")
        ui.caption("measured", "Effective step on x: lr divided by the denominator each optimiser used at that "
                   "step (optimizer.effective_lr()), same runs.")
        st.markdown(
            "**The max.** Max-AdaBelief keeps the largest belief value seen so far in the denominator, so one "
            "big surprise keeps later steps small (the AMSGrad idea). The CXL design's version takes the max of the "
            "raw s, which is then divided by 1 − b2ᵗ; that factor grows towards 1 over the first ~1/(1 − b2) "
            "steps, so its effective step can still grow. Taking the max of the bias-corrected ŝ (dotted) gives "
            "an effective step that never grows, at a price: one early large surprise caps every later step, "
            "so it can crawl. The table's effective-step column measures the growth.")
    st.dataframe(pd.DataFrame(summary_table(trajs, fn_key)), hide_index=True, key="pg_table")
    ui.caption("measured", "Where each run ended. Effective step growth: the largest factor by which lr / "
               "denominator rose above its smallest earlier value (1 = never grew).")

# ---------------------------------------------------------------- the counterexample
st.header("Adam's counterexample")
st.markdown(
    "Reddi, Kale and Kumar (*On the convergence of Adam and beyond*, ICLR 2018) give an online problem on "
    "[−1, 1]: at step t the loss is f_t(x) = 1010x when t mod 101 = 1 and −10x otherwise, b1 = 0.9, "
    "b2 = 0.99, and x is projected back onto [−1, 1] after every step. Over every 101 steps the slopes add "
    "up to +10, so the best point is **x = −1**. The one large gradient inflates the second moment, which "
    "then decays (b2 = 0.99) while a hundred small gradients push x the other way.")
with st.form("counterexample"):
    c1, c2, c3 = st.columns(3)
    ce_schedule = ui.control(c1, "ce_schedule",
                             format_func=lambda s: "lr / √t (the paper's)" if s == "1/sqrt(t)" else "constant lr")
    ce_lr = ui.control(c2, "ce_lr")
    ce_steps = ui.control(c3, "ce_steps")
    ce_opts = ui.control(st, "ce_opts")
    st.form_submit_button("Run", type="primary", key="ce_run")

with ui.guarded("the counterexample"):
    run = counterexample(tuple(ce_opts), int(ce_steps), float(ce_lr), ce_schedule)
    labels = {k: OPTIMIZER_LABELS[k] for k in run.x}
    st.plotly_chart(figs.counterexample_figure(run.x, labels), key="ce_x")
    ui.caption("measured", f"x after each of {run.steps} steps. Computed from the optimisers' update vectorised "
               "over time: the gradient does not depend on x, so the moments are computed for all t at once "
               "and only the projection runs step by step (tests check this equals stepping lab.optim.optimizers's "
               "optimisers to rounding; tests/optim/test_optim.py holds them to 1e-12). The default, lr/√t with 50,500 steps (500 periods), shows the effect "
               "in well under a second; long lines are thinned to each bucket's min and max.")
    st.info(describe_counterexample(run), icon=":material/insights:")
    st.markdown(
        "**What to look for.** Without a max, the denominator forgets the rare large gradient within about "
        "1/(1 − b2) = 100 steps, so the hundred small gradients that follow are divided by a small number and "
        "take large steps towards +1. With the max, the denominator keeps the memory of the large gradient, "
        "the small gradients' steps stay small, and the net pull of each period (+10, towards −1) can win. "
        "The belief term sees the same spike: at the large gradient g − m_t = b1 (g − m_(t−1)) ≈ 0.9 × 1020, "
        "so AdaBelief's s rises and decays much like Adam's v.")
    st.plotly_chart(figs.regret_figure(run.avg_regret, labels), key="ce_regret")
    ui.caption("measured", "Average regret R_t / t = (1/t) Σ f_k(x_(k−1)) − f_k(−1), same runs: it tends to 0 "
               "only for a method that converges to the optimum.")
