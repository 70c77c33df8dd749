"""Placement: which operator runs on which device, why, and how the balance is found."""

import math

import pandas as pd
import streamlit as st

import ui
from lab import placement as pl
from lab.balance import RULE_LABELS, RULES, balance_data_parallel, balance_model_parallel, per_sample_times
from lab.figures import placement as figs
from lab.models import MODEL_LABELS, MODEL_NAMES
from lab.opgraph import trace

sc = ui.scenario_sidebar()
topo = sc.topology
st.title("Placement")
st.markdown("Each preset model is traced (torch.fx) into operators with FLOPs and bytes. The cost model turns them "
            "into seconds on every device of the scenario's topology (**FLOPs / the device's throughput for the "
            "operator's class**; a device without that kernel cannot run it) and transfers into seconds over the "
            "route (**latency + bytes / bottleneck**). Each strategy then places every operator. Everything on this "
            "page is modelled from the topology's numbers, not measured.")


@st.cache_data(max_entries=32, show_spinner=False)
def op_graph(model: str, batch: int):
    return trace(model, batch)


c1, c2, c3 = st.columns([1, 1, 2])
model = c1.selectbox("Model", MODEL_NAMES, index=MODEL_NAMES.index(sc.training.model), format_func=MODEL_LABELS.get,
                     key="pl_model")
batch = int(c2.number_input("Batch size (samples)", 1, 65536, sc.training.batch_size, key="pl_batch"))
strategy = c3.selectbox("Strategy", list(pl.STRATEGIES), format_func=pl.STRATEGY_LABELS.get, key="pl_strategy")
st.caption(f"Topology **{ui.plain(topo.name)}**: {', '.join(f'{d.name} ({d.type})' for d in topo.devices)}. "
           "Change it on the Topology page.")

g = None
with ui.guarded("the placement"):
    og = op_graph(model, batch)
    g = pl.TaskGraph.from_model(og, topo)
    shown = g
    if strategy == "optimal" and len(g) > pl.OPTIMAL_MAX_TASKS:
        shown, groups = pl.coarsen(g, pl.OPTIMAL_MAX_TASKS)
        st.info(f"The exact search handles at most {pl.OPTIMAL_MAX_TASKS} tasks; this model has {len(g)} operators, "
                f"so it runs on a coarsened graph of {len(shown)} groups (each group stays on one device, so this "
                "optimum is an upper bound on the true one).", icon=":material/info:")
    s = pl.run_strategy(strategy, shown).validate(shown)
    scale, unit = figs.time_unit(s.makespan)
    moved = sum(1 for (u, v) in shown.transfer if s.slots[u][0] != s.slots[v][0])
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(f"Makespan ({unit})", f"{s.makespan * scale:.4g}")
    m2.metric("Operators", len(og))
    m3.metric("Devices used", len(set(s.assignment.values())))
    m4.metric("Transfers between devices", moved)
    if s.note:
        st.caption(s.note)
    st.plotly_chart(figs.gantt_figure(pl.schedule_table(shown, s), shown.devices,
                                      f"{pl.STRATEGY_LABELS[strategy]}: one forward pass"), key="pl_gantt")
    ui.caption("modelled", "each bar is an operator on a device, from its start to its finish; gaps are waiting "
                           "(for inputs or for the device).")
    st.subheader("Assignment")
    rows = []
    for r in pl.schedule_table(shown, s):
        row = {"operator": str(r["task"]), "class": r["class"], "FLOPs": r["flops"], "device": r["device"],
               f"start ({unit})": r["start"] * scale, f"finish ({unit})": r["finish"] * scale}
        row |= {f"on {d} ({unit})": (t * scale if math.isfinite(t) else None) for d, t in r["times"].items()}
        rows.append(row)
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="pl_table")
    ui.caption("modelled", f"times in {unit}; an empty 'on device' cell means that device has no kernel for the "
                           "operator's class. Data-layout ops (view, flatten, transpose) are merged into the operator "
                           "that produced their input.")
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
        st.warning(f"Over-full: {', '.join(over)} hold more than their memory.", icon=":material/warning:")

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
        span = max(r["makespan"] for r in rows if r["makespan"] is not None)
        cscale, cunit = figs.time_unit(span)
        st.dataframe(pd.DataFrame([{"graph": r["graph"], "strategy": r["strategy"],
                                    f"makespan ({cunit})": r["makespan"] * cscale if r["makespan"] else None,
                                    "above optimum (%)": 100 * r["gap"] if r["gap"] is not None else None,
                                    "note": r["note"]} for r in rows]), hide_index=True, key="pl_compare_table",
                     column_config={"above optimum (%)": st.column_config.NumberColumn(format="%.1f")})
        ui.caption("modelled", "one forward pass of one batch; chain_dp optimises the steady pipeline bottleneck "
                               "(its note), not this single-pass makespan.")

st.subheader("Dynamic load balancing (seed B, S3–S6)")
st.markdown("Every node starts with an equal weight. Each round the planner plans with the weights, the round runs "
            "at the **true** speeds (the catalogue's divided by the slowdown below, times seeded noise), every node's "
            "waiting time is recorded, and if `(max wait − mean wait) / round time` exceeds the tolerance the weights "
            "are updated. The loop stops when the plan has not changed for *patience* rounds. Both update rules run "
            "side by side: " + "; ".join(f"**{r}** = {RULE_LABELS[r]}" for r in RULES) + ". A stable plan is not "
            "necessarily a good one: the wait rule only sees idle time, so it can settle on a slower plan than the "
            "one the planner would make knowing the true speeds (the green line).")
b1, b2 = st.columns([1, 2])
mode = b1.radio("What is balanced", ["model", "data"], key="pl_bal_mode", format_func={
    "model": "operators across devices (model parallel)", "data": "batch shares (data parallel, seed C)"}.get)
names = topo.device_names
fastest = max(names, key=lambda n: topo.device(n).throughput.get("matmul", 0.0))
slowdown = {}
cols = b2.columns(min(len(names), 5))
for i, n in enumerate(names):
    slowdown[n] = cols[i % len(cols)].number_input(f"{n} slowdown (×)", 0.01, 1e6, 20.0 if n == fastest else 1.0,
                                                   key=f"pl_slow_{n}")
b2.caption(f"By default {fastest} (the catalogue's fastest matmul device) runs 20× slower than its datasheet.")
noise, seed, tol, patience, max_rounds = 0.02, sc.training.seed, 0.05, 3, 40  # lesson mode: the defaults
if not ui.lesson_mode():
    k1, k2, k3, k4, k5 = st.columns(5)
    noise = k1.number_input("noise σ", 0.0, 1.0, noise, 0.01, key="pl_noise")
    seed = int(k2.number_input("seed", 0, 2**31 - 1, seed, key="pl_seed"))
    tol = k3.number_input("tolerance", 0.0, 1.0, tol, 0.01, key="pl_tol")
    patience = int(k4.number_input("patience (rounds)", 1, 100, patience, key="pl_patience"))
    max_rounds = int(k5.number_input("max rounds", 1, 500, max_rounds, key="pl_rounds"))
if g is not None:
    with ui.guarded("the balancing loop"):
        kw = dict(slowdown=slowdown, noise=noise, seed=seed, tolerance=tol, patience=patience, max_rounds=max_rounds)
        if mode == "model":
            results = {r: balance_model_parallel(g, rule=r, **kw) for r in RULES}
        else:
            per_sample = per_sample_times(og, topo)
            kw["slowdown"] = {n: slowdown[n] for n in per_sample}
            st.caption(f"Data-parallel nodes: the devices that can run the whole model ({', '.join(per_sample)}); "
                       f"the global batch of {batch} samples is split between them.")
            results = {r: balance_data_parallel(per_sample, batch, rule=r, **kw) for r in RULES}
        nodes = results[RULES[0]].nodes
        series = {r: {"round": [x.round for x in res.rounds], "round_time": [x.round_time for x in res.rounds],
                      "max_wait": [x.max_wait for x in res.rounds], "mean_wait": [x.mean_wait for x in res.rounds],
                      "weights": [x.weights for x in res.rounds]} for r, res in results.items()}
        ref = results[RULES[0]].reference
        scale, unit = figs.time_unit(max(x.round_time for res in results.values() for x in res.rounds))
        st.plotly_chart(figs.balance_figure(series, nodes, ref["round_time"]), key="pl_balance")
        ui.caption("modelled", "each round is simulated with the cost model at the true speeds, not run.")
        for r, res in results.items():
            last = res.final
            verdict = "stopped" if res.converged else "did not stop"
            st.markdown(f"**{r}** ({RULE_LABELS[r]}): {verdict} after {len(res.rounds)} rounds ({res.reason}); "
                        f"last round {last.round_time * scale:.4g} {unit} vs {ref['round_time'] * scale:.4g} {unit} "
                        f"for the {'plan' if mode == 'model' else 'split'} made with the true speeds "
                        f"{ui.badge('modelled')}.")
        tabs = st.tabs([f"rounds: {r}" for r in results])
        for tab, (r, res) in zip(tabs, results.items()):
            tab.dataframe(pd.DataFrame([{
                "round": x.round, **{f"w {n}": w for n, w in zip(nodes, x.weights)},
                f"round time ({unit})": x.round_time * scale, f"max wait ({unit})": x.max_wait * scale,
                f"mean wait ({unit})": x.mean_wait * scale, "imbalance": x.imbalance, "good enough": x.good_enough,
                ("operators moved" if mode == "model" else "samples moved"): x.changes,
                "plan": ", ".join(map(str, x.plan)) if mode == "data" else ", ".join(
                    f"{n}:{sum(1 for p in x.plan if p == n)}" for n in nodes if n in x.plan)}
                for x in res.rounds]), hide_index=True, key=f"pl_rounds_{r}")
        ui.caption("modelled", f"weights: {'batch shares' if mode == 'data' else 'the planner speed factor per device'}"
                               "; imbalance = (max wait − mean wait) / round time (dimensionless).")
