"""All-reduce: what each device sends at each step, how long that takes on this cluster, and a real measurement."""

import streamlit as st

import ui
from lab.view import allreduce as view

sc = ui.scenario_sidebar()
lesson = ui.lesson_mode()  # the model leaves out the advanced tables; the table marks the advanced controls
topo = sc.topology
st.title("All-reduce")
st.markdown(view.INTRO)

c1, c2 = st.columns(2)  # two columns and the ring below them: a 1024-pixel projector shows them whole
# A lesson may hide a control for a focused exercise (ui.hidden): its value from the lesson stays in force.
v = {"ar_source": ui.control(c1, "ar_source")}
if v["ar_source"] == "topology":
    for key, value, notice in view.participant_fixes(topo, ui.view_value("ar_devices")):
        ui.set_view(key, value, notice=notice)
    v["ar_devices"] = ui.control(c1, "ar_devices", options=topo.device_names)
else:
    v |= {k: ui.control(c1, k) for k in view.IDENTICAL_KEYS}
v["ar_alg"] = ui.control(c2, "ar_alg")
v["ar_size"] = ui.control(c2, "ar_size", format_func=view.human_bytes)
c3 = st.container()
v["ar_order"] = ui.control(c3, "ar_order")

m = None
with ui.guarded("the all-reduce set-up"):
    m = view.prepare(v, topo)
    ui.show(view.ring(m, ui.badge("modelled")), c3)

if m is not None:
    ui.show(view.STEPS_HEAD)
    with ui.guarded("the step-through"):
        for key, value, notice in view.step_fixes(m, ui.view_value("ar_step"), st.session_state.get("ar_play")):
            ui.set_view(key, value, notice=notice)
        playing = ui.control(st, "ar_play")

        @st.fragment(run_every=0.9 if playing else None)
        def step_through() -> None:
            if st.session_state.get("ar_play"):  # one step further each tick; at the end the play stops
                nxt = view.next_step(m, ui.view_value("ar_step"))
                if nxt is None:
                    st.session_state["ar_play"] = False
                    st.rerun()
                ui.set_view("ar_step", nxt)
            where = st
            if not ui.hidden("ar_step"):  # a lesson that hides the slider hides its buttons too
                back, where, on = st.columns([1, 8, 1], vertical_alignment="bottom")
                for col, (label, key, icon, to, off) in zip((back, on), view.step_buttons(m, ui.view_value("ar_step"))):
                    # the callback sets the slider's own value before the rerun: one step control, moved three ways
                    col.button(label, key=key, icon=icon, disabled=off, on_click=ui.set_view, args=("ar_step", to),
                               width="stretch")
            step = ui.control(where, "ar_step", hi=m.steps)
            ui.remember("ar_step", step)
            ui.show_all(view.step_through(m, step))

        step_through()
        ui.show(view.bytes_moved(m))

    ui.show(view.TIMING_HEAD)
    with ui.guarded("the time model"):
        ui.show_all(view.timing(m, lesson=lesson))

    ui.show_all(view.trigger_head(lesson=lesson))
    with ui.guarded("the trigger timeline"):
        gflop = ui.control(st, "ar_work")
        edited = ui.control(st, "ar_compute", data=view.compute(m, gflop), hide_index=True, disabled=["device"])
        ui.show_all(view.trigger(m, edited, lesson=lesson))

    ui.show(view.MEASURED_HEAD)
    k1, k2, k3 = st.columns(3)
    procs = ui.control(k1, "ar_procs")
    top = ui.control(k2, "ar_top", format_func=view.human_bytes)
    iters = ui.control(k3, "ar_iters")
    if st.button("Run the measurement", key="ar_measure", icon=":material/speed:"):
        with ui.guarded("the measurement"):
            bar = st.progress(0.0, "starting the processes")
            st.session_state["ar_rows"] = view.measure(procs, top, iters, bar.progress)
    if st.session_state.get("ar_rows"):
        with ui.guarded("the measured results"):
            ui.show_all(view.measured(st.session_state["ar_rows"]))
