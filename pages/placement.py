"""Placement: which operator runs on which device, why, what a pin costs, and how the balance is found."""

import pandas as pd
import streamlit as st

import ui
from lab.modelled import placement as pl
from lab.modelled.balance import RULE_LABELS, RULES, balance_data_parallel, balance_model_parallel, per_sample_times
from lab.figures import placement as figs
from lab.machine.costmodel import cost_model
from lab.machine.profile import load_profile
from lab.scenario.names import COST_MODEL_LABELS, COST_MODELS, MODEL_LABELS, MODELS
from lab.modelled.opgraph import trace

BASELINE = "placement_baseline"  # the plan kept for comparison (session only, not part of the link)

sc = ui.scenario_sidebar()
topo = sc.topology
pins = dict(sc.training.pins)
st.title("Placement")
st.markdown("Each preset model is traced (torch.fx) into operators with FLOPs and bytes. A cost model turns them "
            "into seconds on every device of the scenario's topology and transfers into seconds over the route "
            "(**latency + bytes / bottleneck**). Each strategy then places every operator; a **pin** puts one "
            "operator on a device of your choice and the strategy places the rest around it. Everything on this "
            "page is modelled, not measured: from the catalogue's throughputs, or from this machine's calibrated "
            "costs (the numbers the Training page predicts with).")


@st.cache_data(max_entries=32, show_spinner=False)
def op_graph(model: str, batch: int):
    return trace(model, batch)


def set_pins(change: str) -> None:
    """Pin / unpin the chosen operator, or clear every pin, in the session's scenario."""
    now, ss = ui.scenario(), st.session_state
    new = dict(now.training.pins)
    if change == "pin":
        new[ss["pl_pin_op"]] = ss["pl_pin_dev"]
    elif change == "unpin":
        new.pop(ss["pl_pin_op"], None)
    else:
        new = {}
    ui.set_scenario(now.replace(training=now.training.replace(pins=new)))


c1, c2, c3 = st.columns([1, 1, 2])
model = c1.selectbox("Model", MODELS, format_func=MODEL_LABELS.get, key="pl_model")
batch = int(c2.number_input("Batch size (samples)", 1, 65536, key="pl_batch"))
strategy = c3.selectbox("Strategy", list(pl.STRATEGIES), format_func=pl.STRATEGY_LABELS.get, key="pl_strategy")
cm_name = st.radio("Cost model", COST_MODELS, format_func=COST_MODEL_LABELS.get, key="pl_cost", horizontal=True)
st.caption(f"Topology **{ui.plain(topo.name)}**: {ui.plain(', '.join(f'{d.name} ({d.type})' for d in topo.devices))}. "
           "Change it on the Topology page.")

og = g = cm = None
with ui.guarded("tracing the model"):
    og = op_graph(model, batch)
with ui.guarded("the cost model"):
    cm = cost_model(cm_name, load_profile())
if og is None or cm is None:
    st.stop()
st.caption(f"Cost model: {cm.describe()}. Transfers: latency + bytes / bottleneck bandwidth of the route.")
p1, p2, p3, p4, p5 = st.columns([2, 2, 1, 1, 1], vertical_alignment="bottom")
for key, options in (("pl_pin_op", og.names), ("pl_pin_dev", topo.device_names)):
    if st.session_state.get(key) not in options:  # another model or topology: start from its first entry
        st.session_state[key] = options[0]  # set, not dropped, so the browser's box follows
op = p1.selectbox("Operator to pin", og.names, key="pl_pin_op")
p2.selectbox("on device", topo.device_names, key="pl_pin_dev")
p3.button("Pin", key="pl_pin", on_click=set_pins, args=("pin",))
p4.button("Unpin", key="pl_unpin", on_click=set_pins, args=("unpin",), disabled=op not in pins)
p5.button("Clear pins", key="pl_pins_clear", on_click=set_pins, args=("clear",), disabled=not pins)
st.markdown("**Pinned:** " + (", ".join(f"{ui.plain(t)} → {ui.plain(d)}" for t, d in pins.items())
                              or "nothing: the strategy places every operator") + ". Pins are part of the scenario "
            "(saved with it and carried by the page link).")

with ui.guarded("the placement"):
    g = pl.TaskGraph.from_model(og, topo, model=cm).with_pins(pins)
    shown = g
    if strategy == "optimal" and len(g) > pl.OPTIMAL_MAX_TASKS:
        shown, groups = pl.coarsen(g, pl.OPTIMAL_MAX_TASKS)
        st.info(f"The exact search handles at most {pl.OPTIMAL_MAX_TASKS} tasks; this model has {len(g)} operators, "
                f"so it runs on a coarsened graph of {len(shown)} groups (each group stays on one device, so this "
                "optimum is an upper bound on the true one).", icon=":material/info:")
    s = pl.run_strategy(strategy, shown).validate(shown)
    scale, unit = figs.time_unit(s.makespan)
    transfers = pl.transfer_rows(shown, s)
    reasons = pl.reasons(shown, s)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(f"Makespan ({unit})", f"{s.makespan * scale:.4g}")
    m2.metric("Operators", len(og))
    m3.metric("Devices used", len(set(s.assignment.values())))
    m4.metric("Transfers between devices", len(transfers))
    if s.note:
        st.caption(s.note)
    st.plotly_chart(figs.gantt_figure(pl.schedule_table(shown, s), shown.devices,
                                      f"{pl.STRATEGY_LABELS[strategy]}: one {cm.pass_}", transfers, reasons),
                    key="pl_gantt")
    ui.caption("modelled", "each bar is an operator on a device, from its start to its finish (hover: its class and "
                           "why it is there); the red lane under a device holds the transfers arriving there. Bars "
                           f"shorter than {100 * figs.MIN_VISIBLE:.1f} % of the time axis carry a diamond so they stay "
                           "visible. Gaps are waiting (for inputs or for the device).")

    st.subheader("Why is an operator where it is?")
    names = [str(t) for t in shown.tasks]
    if ui.view_value("pl_why") not in names:
        old = ui.view_value("pl_why")
        ui.set_view("pl_why", names[0], notice=f"The operator explained is now {names[0]} ({old} is not in this "
                                               "graph)." if old else None)
    task = st.selectbox("Operator", names, key="pl_why")
    rows = pl.why(shown, s, task)
    w1, w2 = st.columns([3, 2])
    w1.dataframe(pd.DataFrame(figs.why_table(rows)), hide_index=True, key="pl_why_table")
    w1.markdown(f"**{ui.plain(task)}** ({ui.plain(str(shown.task_class(task)))}): {ui.plain(reasons[task])}.")
    w2.plotly_chart(figs.why_figure(rows, task), key="pl_why_fig")
    ui.caption("modelled", "the finish on each device as the earliest-finish rule weighs it when the plan places "
                           "this operator (greedy earliest finish: in topological order; other strategies: in start "
                           "order), with the operators placed before it already queued: inputs exist + transfer "
                           "+ wait for the device + compute = finish.")

    st.subheader("Against a baseline")
    record = pl.plan_record(model, batch, strategy, pins, s)
    k1, k2 = st.columns(2)
    k1.button("Keep this plan as the baseline", key="pl_keep",
              on_click=lambda: st.session_state.__setitem__(BASELINE, record))
    k2.button("Clear baseline", key="pl_base_clear", disabled=BASELINE not in st.session_state,
              on_click=lambda: st.session_state.pop(BASELINE, None))
    if BASELINE in st.session_state:
        summary, brows = pl.compare_plans(st.session_state[BASELINE], record)
        st.markdown(f"**{ui.plain(summary)}** {ui.badge('modelled')}")
        st.dataframe(pd.DataFrame(figs.baseline_table(brows)), hide_index=True, key="pl_base_table",
                     column_config={"change (%)": st.column_config.NumberColumn(format="%+.1f")})
        ui.caption("modelled", "busy time per device (compute only), then the makespan, in the baseline and now.")
    else:
        st.caption("Keep a plan, then pin an operator or change the strategy to see what it costs.")

    st.subheader("Assignment")
    st.dataframe(pd.DataFrame(figs.assignment_table(pl.schedule_table(shown, s), scale, unit, reasons)),
                 hide_index=True, key="pl_table")
    ui.caption("modelled", f"times in {unit}; an empty 'on device' cell means that device has no kernel for the "
                           "operator's class (or a pin excludes it). Data-layout ops (view, flatten, transpose) are "
                           "merged into the operator that produced their input.")
    st.plotly_chart(figs.dag_figure(shown.topological_order(), shown.edges, s.assignment, shown.devices,
                                    {t: f"{shown.task_class(t)}, {shown.info.get(t, {}).get('flops', 0):.3g} FLOPs"
                                     for t in shown.tasks}, "Operator graph coloured by device"), key="pl_dag")
    ui.caption("modelled", "red dashed edges are activations sent between devices.")
    usage = pl.device_usage(shown, s)
    u1, u2 = st.columns(2)
    u1.plotly_chart(figs.usage_figure(usage, s.makespan), key="pl_usage")
    u2.plotly_chart(figs.memory_figure(usage), key="pl_memory")
    ui.caption("modelled", "memory = parameters + output activations (float32) of the operators placed there.")
    over = [u["device"] for u in usage if u["over"]]
    if over:
        st.warning(f"Over-full: {ui.plain(', '.join(over))} hold more than their memory.", icon=":material/warning:")

st.subheader("All strategies on this scenario")
if g is not None:
    with ui.guarded("the comparison"):
        small = len(g) <= pl.OPTIMAL_MAX_TASKS
        names = [n for n in pl.STRATEGIES if small or n != "optimal"]
        rows = [r | {"graph": f"full graph ({len(g)} operators)"} for r in pl.compare_strategies(g, names)]
        if not small:
            coarse, _ = pl.coarsen(g, pl.OPTIMAL_MAX_TASKS)
            rows += [r | {"graph": f"coarsened graph ({len(coarse)} groups)"} for r in pl.compare_strategies(coarse)]
            st.markdown(f"This model has {len(g)} operators, more than the exact search takes, so every strategy also "
                        f"runs on a coarsened graph of {len(coarse)} groups (chains merged first; a group stays on "
                        "one device). The optimum and the gaps are for that graph.")
        st.plotly_chart(figs.comparison_figure(rows), key="pl_compare")
        st.dataframe(pd.DataFrame(figs.comparison_table(rows)), hide_index=True, key="pl_compare_table",
                     column_config={"above optimum (%)": st.column_config.NumberColumn(format="%.1f")})
        ui.caption("modelled", f"one {cm.pass_} of one batch, with the pins; chain_dp optimises the steady pipeline "
                               "bottleneck (its note), not this single-pass makespan.")

st.subheader("Dynamic load balancing: weights from each node's waiting time")
st.markdown("Every node starts with an equal weight. Each round the planner plans with the weights, the round runs "
            "at the **true** speeds (the cost model's divided by the slowdown below, times seeded noise), every node's "
            "waiting time is recorded, and if `(max wait − mean wait) / round time` exceeds the tolerance the weights "
            "are updated. The loop stops when the plan has not changed for *patience* rounds. Both update rules run "
            "side by side: " + "; ".join(f"**{r}** = {RULE_LABELS[r]}" for r in RULES) + ". A stable plan is not "
            "necessarily a good one: the wait rule only sees idle time, so it can settle on a slower plan than the "
            "one the planner would make knowing the true speeds (the green line).")
b1, b2 = st.columns([1, 2])
mode = b1.radio("What is balanced", ["model", "data"], key="pl_bal_mode", format_func={
    "model": "operators across devices (model parallel)", "data": "batch shares (data parallel)"}.get)
dnames = topo.device_names
fastest = max(dnames, key=lambda n: topo.device(n).throughput.get("matmul", 0.0))
slowdown = {}
cols = b2.columns(min(len(dnames), 5))
for i, n in enumerate(dnames):
    if ui.view_value(f"pl_slow_{n}") is None:
        ui.set_view(f"pl_slow_{n}", 20.0 if n == fastest else 1.0)
    slowdown[n] = cols[i % len(cols)].number_input(f"{ui.plain(n)} slowdown (×)", 0.01, 1e6, key=f"pl_slow_{n}")
b2.caption(f"By default {ui.plain(fastest)} (the catalogue's fastest matmul device) runs 20× slower than its "
           "datasheet.")
knobs = {"pl_noise": ("noise σ", 0.0, 1.0, 0.01), "pl_seed": ("seed", 0, 2**31 - 1, 1), "pl_tol": ("tolerance", 0.0,
         1.0, 0.01), "pl_patience": ("patience (rounds)", 1, 100, 1), "pl_rounds": ("max rounds", 1, 500, 1)}
if ui.lesson_mode():  # lesson mode hides the knobs and keeps their values
    noise, seed, tol, patience, max_rounds = (ui.view_value(k) for k in knobs)
else:
    noise, seed, tol, patience, max_rounds = (col.number_input(label, lo, hi, step=step, key=k) for col, (k, (
        label, lo, hi, step)) in zip(st.columns(5), knobs.items()))
if g is not None:
    with ui.guarded("the balancing loop"):
        kw = dict(slowdown=slowdown, noise=noise, seed=int(seed), tolerance=tol, patience=int(patience),
                  max_rounds=int(max_rounds))
        if mode == "model":
            results = {r: balance_model_parallel(g, rule=r, **kw) for r in RULES}
        else:
            per_sample = per_sample_times(og, topo, model=cm)
            kw["slowdown"] = {n: slowdown[n] for n in per_sample}
            st.caption(f"Data-parallel nodes: the devices that can run the whole model "
                       f"({ui.plain(', '.join(per_sample))}); the global batch of {batch} samples is split "
                       "between them.")
            results = {r: balance_data_parallel(per_sample, batch, rule=r, **kw) for r in RULES}
        nodes = results[RULES[0]].nodes
        ref = results[RULES[0]].reference
        scale, unit = figs.time_unit(max(x.round_time for res in results.values() for x in res.rounds))
        st.plotly_chart(figs.balance_figure(figs.balance_series(results), nodes, ref["round_time"]), key="pl_balance")
        ui.caption("modelled", "each round is simulated with the cost model at the true speeds, not run.")
        for r, res in results.items():
            st.markdown(f"**{r}** ({RULE_LABELS[r]}): {'stopped' if res.converged else 'did not stop'} after "
                        f"{len(res.rounds)} rounds ({ui.plain(res.reason)}); last round "
                        f"{res.final.round_time * scale:.4g} {unit} vs {ref['round_time'] * scale:.4g} {unit} for the "
                        f"{'plan' if mode == 'model' else 'split'} made with the true speeds {ui.badge('modelled')}.")
        for tab, (r, res) in zip(st.tabs([f"rounds: {r}" for r in results]), results.items()):
            tab.dataframe(pd.DataFrame(figs.rounds_table(res, nodes, mode, scale, unit)), hide_index=True,
                          key=f"pl_rounds_{r}")
        ui.caption("modelled", f"weights: {'batch shares' if mode == 'data' else 'the planner speed factor per device'}"
                               "; imbalance = (max wait − mean wait) / round time (dimensionless).")
