"""Jobs: the task-level design's job lifecycle on this machine (queue, placement on cores,
heartbeats, alarms, restarts, logs, stop and release), and a what-if of the two scheduling policies
on a topology. A session sees and manages its own jobs; the whole class's jobs are shown read-only on
request; the teacher (signed in here with LAB_TEACHER_TOKEN) manages every job."""

import streamlit as st

import ui
from lab.view import jobs as view

sc = ui.scenario_sidebar()
desk = view.Desk(*ui.job_manager(), client=ui.client())  # one manager per run store, shared by every session
st.title("Jobs")
st.markdown(view.intro(ui.badge("measured")))
ui.show_all(desk.opening())

with st.expander(view.DRILL, icon=":material/bolt:"):
    c1, c2, c3, c4, c5 = st.columns(5)
    drill = dict(kind=ui.control(c1, "jobs_fault"), worker=ui.control(c2, "jobs_fault_worker",
                                                                      hi=view.drill_workers(sc) - 1),
                 at_step=ui.control(c3, "jobs_fault_step"), policy=ui.control(c4, "jobs_fault_policy"),
                 checkpoint_every=ui.control(c5, "jobs_fault_ck"))
    if st.button("Start the job", key="jobs_fault_run", icon=":material/play_arrow:"):
        with ui.guarded("starting the fault drill"):
            st.session_state["jobs_pick"] = desk.start_drill(sc, **drill)
            st.rerun()

if view.has_teacher():  # a server without LAB_TEACHER_TOKEN has no teacher
    with st.expander("Teacher", icon=":material/school:", expanded=False):
        if desk.teacher:
            if st.button("Sign out as the teacher", key="jobs_teacher_out"):
                desk.sign_out()
                st.rerun()
            with st.form("jobs_limits_form", border=False):
                st.markdown(view.LIMITS_INTRO)
                l1, l2, l3 = st.columns(3)
                lim = desk.limits()
                limits = (ui.control(l1, "jobs_max_steps", value=lim["jobs_max_steps"]),
                          ui.control(l2, "jobs_max_s", value=lim["jobs_max_s"]),
                          ui.control(l3, "jobs_max_procs", value=lim["jobs_max_procs"]))
                if st.form_submit_button("Set the limits"):
                    with ui.guarded("setting the limits"):
                        desk.set_limits(*limits)
                        st.rerun()
        else:
            with st.form("jobs_teacher_form", clear_on_submit=True, border=False):
                claim = ui.control(st, "jobs_teacher_token")
                if st.form_submit_button("Sign in as the teacher"):
                    with ui.guarded("signing in"):
                        if desk.sign_in(claim):
                            st.rerun()
                        st.error(view.WRONG_TOKEN, icon=":material/error:")
teacher = desk.teacher
if teacher:
    st.info(view.TEACHER_LINE, icon=":material/school:")
everyone = teacher or ui.control(st, "jobs_class")
# Poll only while a job in this view is queued or running; a full rerun when they end turns it off.
polling = desk.polling(everyone)


@ui.live("jobs", 1.0, polling)
def live() -> None:
    with ui.guarded("the job list"):
        board = desk.board(everyone)
        if polling and board.labels and not board.active:
            st.rerun()
        ui.show_all(board.sections)
        if board.labels:
            details(ui.control(st, "jobs_pick", options=list(board.labels), format_func=board.labels.get))


def details(rid: str) -> None:
    job = desk.job(rid)
    st.subheader(job.title)
    st.text(job.name)
    if job.manageable:
        b1, b2, _ = st.columns([1, 1, 4])
        if b1.button("Stop", key="jobs_stop", icon=":material/stop:", disabled=not job.active):
            with ui.guarded("stopping the job"):
                desk.stop(rid)
                st.rerun()
        if b2.button("Release", key="jobs_release", icon=":material/cleaning_services:", disabled=not job.finished,
                     help=view.RELEASE_HELP):
            with ui.guarded("releasing the job"):
                st.success(desk.release(rid))
    else:
        st.caption(job.read_only)
    if job.stopped:
        st.text(job.stopped)
    ui.show_all(job.sections)
    if job.tails:
        for tab, text in zip(st.tabs(list(job.tails)), job.tails.values()):
            tab.code(text, language=None)


live()

st.header(view.HEADER)
st.markdown(view.whatif_intro(ui.badge("modelled")))
with ui.guarded("the scheduling what-if"):
    what = view.what_if(sc, ui.control(st, "jobs_topo", format_func=view.topology_label))
    ui.show(what.table)
    edited = ui.control(st, "jobs_whatif", data=view.whatif_start(), num_rows="dynamic", hide_index=True,
                        column_config=ui.column_config(what.columns))
    policies = what.policies(edited, ui.control(st, "jobs_maxrun"))
    for col, policy in zip(st.columns(len(policies)), policies):
        ui.show(policy.chart, col)
        for label, value in policy.metrics:
            col.metric(label, value)
        ui.show(policy.after, col)
    ui.caption("modelled", view.WHATIF_CAPTION)
