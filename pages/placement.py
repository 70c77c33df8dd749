"""Placement: which operator runs on which device, why, what a pin costs, and how the balance is found."""

import streamlit as st

import ui
from lab.view import placement as view

sc = ui.scenario_sidebar()
st.title("Placement")
st.markdown(view.INTRO)
desk = view.Desk(*ui.job_manager())


def controls(where, keys) -> dict:
    return {k: ui.control(w, k, **view.upload.control_options(k, ui.view_value(k))) for w, k in zip(where, keys)}


def submit(what: str, make, action: str, shown: str, keep=()) -> None:
    """Queue the runs ``make()`` gives once, and show them (after the runs ``keep``) under control ``shown``."""
    with ui.guarded(what):
        items = make()
        if jobs := ui.submit_once(desk.owner, items[0][0], action, view.run_store(), lambda: desk.submit_many(items)):
            ui.set_view(shown, view.shown_runs(keep, [j.run_id for j in jobs]))
            st.rerun()


with st.expander("Bring your own network (an ONNX file)", icon=":material/upload_file:"):
    if name := view.upload.take(st.session_state, ui.control(st, "pl_upload", type=["onnx"])):
        ui.set_view("pl_model", name)
    ui.show_all(view.upload.notes(st.session_state))
costs, cost = view.cost_choice(ui.view_value("pl_cost"))
ui.set_view("pl_cost", cost)
v = controls((*st.columns([3, 1]), st), view.PLAN_CONTROLS) | {"pl_cost": ui.control(st, "pl_cost", options=costs)}
ui.show(view.topology(sc.topology))
pv = None
with ui.guarded("the placement"):
    pv = view.PlacementView.build(sc, v)
if pv is None:
    st.stop()
ui.show(pv.cost_model())
p1, p2, p3, p4, p5 = st.columns([2, 2, 1, 1, 1], vertical_alignment="bottom")
op = ui.control(p1, "pl_pin_op", options=pv.operators)
ui.control(p2, "pl_pin_dev", options=pv.devices)
for col, (label, key, change, off) in zip((p3, p4, p5), view.pin_buttons(op, pv.pins)):
    col.button(label, key=key, disabled=off,  # pin / unpin the chosen operator, or clear every pin
               on_click=lambda c: ui.set_scenario(view.with_pins(ui.scenario(), c, st.session_state)), args=(change,))
ui.show(pv.pinned())

with ui.guarded("the placement"):
    ui.show_all(pv.plan())
    st.subheader("Why is an operator where it is?")
    if fixed := pv.explained(ui.view_value("pl_why")):
        ui.set_view("pl_why", *fixed)
    left, right, below = pv.why(ui.control(st, "pl_why", options=pv.tasks))
    for where, part in zip((*st.columns([3, 2]), st), (left, right, below)):
        ui.show(part, where)

    st.subheader("Against a baseline")
    k1, k2 = st.columns(2)
    k1.button("Keep this plan as the baseline", key="pl_keep", on_click=ui.set_view, args=("pl_baseline", pv.baseline))
    k2.button("Clear baseline", key="pl_base_clear", disabled=not ui.view_value("pl_baseline"), on_click=ui.set_view,
              args=("pl_baseline", ""))
    sections, dropped = pv.against_baseline(ui.view_value("pl_baseline"), ui.badge)
    if dropped:
        ui.set_view("pl_baseline", "", notice=dropped)
    ui.show_all(sections + pv.assignment())

with ui.guarded("the comparison"):
    ui.show(pv.comparison())
ui.show(view.RUN)
run = controls((*st.columns([1, 2]), *st.columns([1, 1, 2], vertical_alignment="bottom")), view.RUN_CONTROLS)
q1, q2 = st.columns(2)
if pv.placeable and q1.button("Run this plan", type="primary", key="pl_run", icon=":material/play_arrow:"):
    submit("starting the placement run", lambda: pv.plan_items(run), "plan", "pl_runs", ui.view_value("pl_runs"))
if pv.placeable and q2.button("Run every strategy", key="pl_run_all", icon=":material/format_list_numbered:"):
    submit("queueing every strategy", lambda: pv.strategy_items(run), f"plans x{run['pl_repeats']}", "pl_runs")
plan_runs = view.PlanRuns(view.run_store(), ui.view_value("pl_runs"), desk.owner)


@ui.live("plan_runs", 1.0, plan_runs.active)
def show_plan_runs() -> None:
    with ui.guarded("the placement runs"):
        ui.show_all(plan_runs.ranking())
        if plan_runs.ids:
            ui.show_all(plan_runs.drawn(ui.control(st, "pl_run_drawn", options=plan_runs.ids,
                                                   format_func=plan_runs.labeller())))


show_plan_runs()

ui.show(view.BALANCE)
b1, b2 = st.columns([1, 2])
bal = {"pl_bal_mode": ui.control(b1, "pl_bal_mode", horizontal=False)}
bal |= ui.per_device(b2, pv.slowdowns, pick="pl_pick_slow" if pv.slowdown_picker else None)
if pv.slowdown_picker:  # the devices not at 1×, listed beside the one picked device's box
    ui.show(pv.slowed(bal), b2)
ui.show(pv.slowdown_note(), b2)
bal |= controls(st.columns(5), view.BALANCE_KNOBS)
if pv.placeable:
    with ui.guarded("the balancing loop"):
        loop = pv.balancing(bal)
        ui.show_all(loop.sections(ui.plain, ui.badge))
        for tab, rounds in zip(st.tabs(loop.tabs), loop.rounds):
            ui.show(rounds, tab)
        ui.show(loop.tail)

if pv.placeable and bal["pl_bal_mode"] == "model":
    ui.show(view.BALANCE_RUN)
    l1, l2 = st.columns([1, 3], vertical_alignment="bottom")
    bal["pl_round_steps"] = ui.control(l1, "pl_round_steps")
    if l2.button("Run the balancing loop (both rules)", key="pl_bal_run", icon=":material/play_arrow:"):
        submit("starting the balancing runs", lambda: pv.balance_items(run | bal), "balance", "pl_bal_runs")
    balance_runs = view.BalanceRuns(view.run_store(), ui.view_value("pl_bal_runs"), pv.balance_results)

    @ui.live("balance_runs", 1.0, balance_runs.active)
    def show_balance_runs() -> None:
        with ui.guarded("the balancing runs"):
            ui.show_all(balance_runs.sections(ui.plain, ui.badge))

    show_balance_runs()
