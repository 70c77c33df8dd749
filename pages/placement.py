"""Placement: which operator runs on which device, why, what a pin costs, and how the balance is found."""

import pandas as pd
import streamlit as st

import ui
from lab.figures import placement as figs
from lab.figures import plan_run as run_figs
from lab.view import jobs as job_views
from lab.machine import plans
from lab.machine.calibrated_model import cost_model
from lab.machine.profile import load_profile
from lab.modelled import placement as pl
from lab.modelled.opgraph import trace
from lab.scenario.names import STRATEGY_SHORT
from lab.store.runs import store
from lab.view import placement as pv

sc = ui.scenario_sidebar()
topo = sc.topology
pins = dict(sc.training.pins)
st.title("Placement")
st.markdown(pv.INTRO)


@st.cache_data(max_entries=32, show_spinner=False)
def op_graph(model: str, batch: int):
    return trace(model, batch)


def set_pins(change: str) -> None:
    """Pin / unpin the chosen operator, or clear every pin, in the session's scenario."""
    now, ss = ui.scenario(), st.session_state
    new = pv.changed_pins(now.training.pins, change, ss["pl_pin_op"], ss["pl_pin_dev"])
    ui.set_scenario(now.replace(training=now.training.replace(pins=new)))


c1, c2, c3 = st.columns([3, 2, 4])
model = ui.control(c1, "pl_model")
batch = int(ui.control(c2, "pl_batch"))
strategy = ui.control(c3, "pl_strategy", format_func=pl.STRATEGY_LABELS.get)
cm_name = ui.control(st, "pl_cost")
st.caption(pv.topology_line(topo, ui.plain))

og = g = cm = None
with ui.guarded("tracing the model"):
    og = op_graph(model, batch)
with ui.guarded("the cost model"):
    cm = cost_model(cm_name, load_profile())
if og is None or cm is None:
    st.stop()
st.caption(pv.cost_model_line(cm))
p1, p2, p3, p4, p5 = st.columns([2, 2, 1, 1, 1], vertical_alignment="bottom")
op = ui.control(p1, "pl_pin_op", options=og.names)
ui.control(p2, "pl_pin_dev", options=topo.device_names)
p3.button("Pin", key="pl_pin", on_click=set_pins, args=("pin",))
p4.button("Unpin", key="pl_unpin", on_click=set_pins, args=("unpin",), disabled=op not in pins)
p5.button("Clear pins", key="pl_pins_clear", on_click=set_pins, args=("clear",), disabled=not pins)
st.markdown(pv.pins_line(pins, ui.plain))

with ui.guarded("the placement"):
    g = pl.TaskGraph.from_model(og, topo, model=cm).with_pins(pins)
    shown, note, s, transfers, reasons = pv.placed(strategy, g)
    if note:
        st.info(note, icon=":material/info:")
    scale, unit = figs.time_unit(s.makespan)
    for col, (label, value) in zip(st.columns(4), pl.plan_metrics(s, len(og), transfers, scale, unit)):
        col.metric(label, value)
    if s.note:
        st.caption(s.note)
    differs = pv.other_plan_line(strategy, og, topo, pins, s.assignment, cm_name, load_profile())
    if differs:
        st.caption(ui.plain(differs))
    st.plotly_chart(figs.gantt_figure(pl.schedule_table(shown, s), shown.devices,
                                      f"{pl.STRATEGY_LABELS[strategy]}: one {cm.pass_}", transfers, reasons),
                    key="pl_gantt")
    ui.caption("modelled", figs.gantt_caption())

    st.subheader("Why is an operator where it is?")
    names = [str(t) for t in shown.tasks]
    why, notice = pv.explained(names, ui.view_value("pl_why"))
    if why != ui.view_value("pl_why"):
        ui.set_view("pl_why", why, notice=notice)
    task = ui.control(st, "pl_why", options=names)
    rows = pl.why(shown, s, task)
    w1, w2 = st.columns([3, 2])
    w1.dataframe(pd.DataFrame(figs.why_table(rows)), hide_index=True, key="pl_why_table")
    w1.markdown(f"**{ui.plain(task)}** ({ui.plain(str(shown.task_class(task)))}): {ui.plain(reasons[task])}.")
    w2.plotly_chart(figs.why_figure(rows, task), key="pl_why_fig")
    ui.caption("modelled", pv.why_caption(cm))

    st.subheader("Against a baseline")
    record = pl.plan_record(model, batch, strategy, pins, s, topo, cm_name)
    k1, k2 = st.columns(2)
    k1.button("Keep this plan as the baseline", key="pl_keep",
              on_click=lambda: ui.set_view("pl_baseline", pv.baseline_json(record)))
    k2.button("Clear baseline", key="pl_base_clear", disabled=not ui.view_value("pl_baseline"),
              on_click=lambda: ui.set_view("pl_baseline", ""))
    summary, brows, dropped = pv.against_baseline(ui.view_value("pl_baseline"), record)
    if dropped:
        ui.set_view("pl_baseline", "", notice=dropped)
    if brows is not None:
        st.markdown(f"**{ui.plain(summary)}** {ui.badge('modelled')}")
        table = figs.baseline_table(brows)
        st.dataframe(pd.DataFrame(table), hide_index=True, key="pl_base_table",
                     column_config=ui.column_config(pv.baseline_columns(table[0])))
        ui.caption("modelled", pv.BASELINE_CAPTION)
    else:
        st.caption(pv.NO_BASELINE)

    st.subheader("Assignment")
    st.dataframe(pd.DataFrame(figs.assignment_table(pl.schedule_table(shown, s), scale, unit, reasons)),
                 hide_index=True, key="pl_table")
    ui.caption("modelled", pv.assignment_caption(unit))
    st.plotly_chart(figs.dag_figure(shown.topological_order(), shown.edges, s.assignment, shown.devices,
                                    pl.task_labels(shown), "Operator graph coloured by device"), key="pl_dag")
    ui.caption("modelled", pv.DAG_CAPTION)
    usage = pl.device_usage(shown, s)
    u1, u2 = st.columns(2)
    u1.plotly_chart(figs.usage_figure(usage, s.makespan), key="pl_usage")
    u2.plotly_chart(figs.memory_figure(usage), key="pl_memory")
    ui.caption("modelled", pv.MEMORY_CAPTION)
    over = pl.over_full(usage)
    if over:
        st.warning(f"Over-full: {ui.plain(', '.join(over))} hold more than their memory.", icon=":material/warning:")

st.subheader("All strategies on this scenario")
if g is not None:
    with ui.guarded("the comparison"):
        rows, note = pl.strategy_comparison(g)
        if note:
            st.markdown(note)
        st.plotly_chart(figs.comparison_figure(rows), key="pl_compare")
        st.dataframe(pd.DataFrame(figs.comparison_table(rows)), hide_index=True, key="pl_compare_table",
                     column_config=ui.column_config(pv.COMPARISON_COLUMNS))
        ui.caption("modelled", pv.comparison_caption(cm.pass_))

st.subheader("Run the plan: measured beside modelled")
st.markdown(pv.run_intro())
r1, r2, r3, r4 = st.columns([1, 1, 1, 2], vertical_alignment="bottom")
micro = int(ui.control(r1, "pl_micro"))
steps = int(ui.control(r2, "pl_steps"))
repeats = int(ui.control(r3, "pl_repeats"))
emulate = ui.control(r4, "pl_emulate")
jm, owner = ui.job_manager()
runs_store = store()
q1, q2 = st.columns(2)
if g is not None and q1.button("Run this plan", type="primary", key="pl_run", icon=":material/play_arrow:"):
    with ui.guarded("starting the placement run"):
        one = pv.plan_scenario(sc, model, batch, strategy, pv.assignment_of(g, strategy), micro, steps, emulate)
        if jobs := ui.submit_once(owner, one, "plan", runs_store, lambda: [
                jm.submit(one, name=f"{STRATEGY_SHORT[strategy]} · {model}", owner=owner)]):
            ui.set_view("pl_runs", pv.shown_runs(ui.view_value("pl_runs"), [j.run_id for j in jobs]))
            st.rerun()
if g is not None and q2.button("Run every strategy", key="pl_run_all", icon=":material/format_list_numbered:"):
    with ui.guarded("queueing every strategy"):
        items = pv.strategy_scenarios(sc, g, model, batch, micro, steps, emulate, repeats)
        if jobs := ui.submit_once(owner, items[0][0], f"plans x{repeats}", runs_store,
                                  lambda: jm.submit_many(items, owner=owner)):
            ui.set_view("pl_runs", pv.shown_runs((), [j.run_id for j in jobs]))
            st.rerun()
shown_ids, active = pv.kept_runs(runs_store, ui.view_value("pl_runs"))


@st.fragment(run_every=1.0 if active else None)
def plan_runs() -> None:
    with ui.guarded("the placement runs"):
        show_plan_runs()


def show_plan_runs() -> None:
    if not shown_ids:
        st.caption("Run this plan (or every strategy) to see it measured here beside the model.")
        return
    runs, labels = job_views.run_picker(runs_store, owner, everyone=True, keep=shown_ids)
    prof = load_profile()
    if len(shown_ids) > 1:
        rows, tau = pv.strategy_ranking(runs_store, shown_ids, prof)
        if rows:
            st.plotly_chart(run_figs.strategy_ranking_figure(rows, title="Strategies: modelled and measured step time"),
                            key="pl_rank_fig")
            st.dataframe(pd.DataFrame(run_figs.ranking_table(rows)), hide_index=True, key="pl_rank_table")
            ui.caption("measured", pv.ranking_line(tau, len(rows)) + " Modelled: " + plans.prediction_caveat(prof, 1)
                       + ".")
    pick = ui.control(st, "pl_run_drawn", options=shown_ids, format_func=lambda r: labels.get(r, r))
    out = plans.plan_outcome(runs_store, pick, prof)
    for col, (label, value) in zip(st.columns(5), pv.outcome_metrics(out)):
        col.metric(label, value)
    if out["note"]:
        st.caption(ui.plain(out["note"]))
    if not out["measured_rows"]:
        st.info(pv.waiting_line(out), icon=":material/hourglass_top:")
        return
    st.plotly_chart(run_figs.run_gantt_figure(out["measured_rows"], out["modelled_rows"], out["devices"],
                                          measured_badge=pv.measured_badge(out), title=pv.gantt_title(out),
                                          replayed=out["replay_rows"]),
                    key="pl_run_gantt")
    ui.caption("measured", pv.gantt_caption(out))
    st.dataframe(pd.DataFrame(run_figs.device_time_table(out["measured_rows"], out["devices"])), hide_index=True,
                 key="pl_run_devices")


plan_runs()

st.subheader("Dynamic load balancing: weights from each node's waiting time")
st.markdown(pv.balance_intro())
b1, b2 = st.columns([1, 2])
mode = ui.control(b1, "pl_bal_mode", format_func=pv.BALANCE_MODES.get, horizontal=False)
dnames = topo.device_names
fastest, defaults = pv.default_slowdowns(topo)
slowdown = {}
cols = b2.columns(min(len(dnames), 5))
for i, n in enumerate(dnames):
    slowdown[n] = ui.control(cols[i % len(cols)], f"pl_slow_{n}", value=defaults[n])
b2.caption(pv.slowdown_note(fastest, ui.plain))
knobs = pv.BALANCE_KNOBS
if ui.lesson_mode():  # lesson mode hides the knobs and keeps their values
    noise, seed, tol, patience, max_rounds = (ui.view_value(k) for k in knobs)
else:
    noise, seed, tol, patience, max_rounds = (ui.control(col, k) for col, k in zip(st.columns(5), knobs))
if g is not None:
    with ui.guarded("the balancing loop"):
        results, per_sample, nodes, ref_time = pv.balancing(g, og, topo, cm, mode, batch, slowdown, noise, seed, tol,
                                                            patience, max_rounds)
        if per_sample is not None:
            st.caption(pv.data_nodes_line(per_sample, batch, ui.plain))
        scale, unit = figs.balance_time_unit(results)
        st.plotly_chart(figs.balance_figure(figs.balance_series(results), nodes, ref_time), key="pl_balance")
        ui.caption("modelled", "each round is simulated with the cost model at the true speeds, not run.")
        for r, res in results.items():
            st.markdown(pv.balance_summary(r, res, mode, ref_time, scale, unit, ui.plain)
                        + f" {ui.badge('modelled')}.")
        for tab, (r, res) in zip(st.tabs([f"rounds: {r}" for r in results]), results.items()):
            tab.dataframe(pd.DataFrame(figs.rounds_table(res, nodes, mode, scale, unit)), hide_index=True,
                          key=f"pl_rounds_{r}")
        ui.caption("modelled", pv.rounds_caption(mode))

if g is not None and mode == "model":
    st.subheader("The balancing loop, run: measured beside modelled")
    st.markdown(pv.balance_run_intro())
    l1, l2 = st.columns([1, 3], vertical_alignment="bottom")
    round_steps = int(ui.control(l1, "pl_round_steps"))
    if l2.button("Run the balancing loop (both rules)", key="pl_bal_run", icon=":material/play_arrow:"):
        with ui.guarded("starting the balancing runs"):
            items = pv.balance_items(sc, g, model, batch, micro, round_steps, max_rounds, tol, patience, slowdown,
                                     strategy)
            if jobs := ui.submit_once(owner, items[0][0], "balance", runs_store,
                                      lambda: jm.submit_many(items, owner=owner)):
                ui.set_view("pl_bal_runs", tuple(j.run_id for j in jobs))
                st.rerun()
    bal_ids, bal_active = pv.kept_runs(runs_store, ui.view_value("pl_bal_runs"))

    @st.fragment(run_every=1.0 if bal_active else None)
    def balance_runs() -> None:
        with ui.guarded("the balancing runs"):
            if not bal_ids:
                st.caption("Run the balancing loop to see it measured here beside the model.")
                return
            st.plotly_chart(run_figs.balance_outcome_figure(pv.balance_outcome(runs_store, bal_ids)), key="pl_bal_outcome")
            ui.caption("measured", pv.BALANCE_OUTCOME_CAPTION)
            for rid, line, measured, modelled in pv.balance_run_panels(runs_store, bal_ids, results, ui.plain):
                st.markdown(line + f" {ui.badge('measured')}")
                st.plotly_chart(run_figs.balance_rounds_figure(measured, modelled), key=f"pl_bal_fig_{rid}")
            ui.caption("measured", pv.BALANCE_ROUNDS_CAPTION)

    balance_runs()
