"""Jobs: the task-level design's job lifecycle on this machine (queue, placement on cores,
heartbeats, alarms, restarts, logs, stop and release), and a what-if of the two scheduling policies
on a topology. A session sees and manages its own jobs; the whole class's jobs are shown read-only on
request; the teacher (signed in here with LAB_TEACHER_TOKEN) manages every job."""

import pandas as pd
import streamlit as st

import ui
from lab.figures import jobs as figs
from lab.jobs.access import teacher_token
from lab.jobs.limits import Limits
from lab.view import jobs as job_views
from lab.modelled.scheduling import POLICIES, POLICY_LABELS, resource_groups
from lab.scenario.catalogue import PRESET_LABELS, preset
from lab.store.runs import ACTIVE, FINISHED, store
from lab.train.watch import heartbeat_timeout

sc = ui.scenario_sidebar()
jm, owner = ui.job_manager()  # one manager per run store, shared by every session
runs_store = store()
jm.sweep()  # runs whose launcher died without a word become interrupted
st.title("Jobs")
st.markdown(job_views.intro(ui.badge("measured")))
st.caption(job_views.queue_rules(jm))
if failing := job_views.recent_failures(jm.failures):
    st.error("The job manager keeps failing (its log has the tracebacks): " + ui.plain(failing),
             icon=":material/error:")

with st.expander("Watch a failure: start a job with an injected fault", icon=":material/bolt:"):
    c1, c2, c3, c4, c5 = st.columns(5)
    kind = ui.control(c1, "jobs_fault")
    workers = max(2, sc.training.workers)
    who = ui.control(c2, "jobs_fault_worker", hi=workers - 1)
    at_step = ui.control(c3, "jobs_fault_step")
    policy = ui.control(c4, "jobs_fault_policy")
    every = ui.control(c5, "jobs_fault_ck")
    if st.button("Start the job", key="jobs_fault_run", icon=":material/play_arrow:"):
        with ui.guarded("starting the fault drill"):
            drill, name = job_views.fault_drill(sc, kind, who, at_step, policy, every)
            job = jm.submit(drill, name=name, owner=owner)
            st.session_state["jobs_pick"] = job.run_id
            st.rerun()

if teacher_token():  # a server without LAB_TEACHER_TOKEN has no teacher
    with st.expander("Teacher", icon=":material/school:", expanded=False):
        if jm.is_teacher(owner):
            if st.button("Sign out as the teacher", key="jobs_teacher_out"):
                jm.roster.sign_out(owner)
                st.rerun()
            with st.form("jobs_limits_form", border=False):
                st.markdown("**What one job may ask of this server** (until it restarts; new jobs over a limit are "
                            "refused, a job running past the time is stopped)")
                l1, l2, l3 = st.columns(3)
                lim = jm.limits
                steps_max = ui.control(l1, "jobs_max_steps", value=lim.max_steps)
                secs_max = ui.control(l2, "jobs_max_s", value=float(lim.max_seconds))
                procs_max = ui.control(l3, "jobs_max_procs", value=lim.max_procs)
                if st.form_submit_button("Set the limits"):
                    with ui.guarded("setting the limits"):
                        jm.set_limits(owner, Limits(int(steps_max), float(secs_max), int(procs_max)))
                        st.rerun()
        else:
            with st.form("jobs_teacher_form", clear_on_submit=True, border=False):
                claim = ui.control(st, "jobs_teacher_token")
                if st.form_submit_button("Sign in as the teacher"):
                    if jm.sign_in_teacher(owner, claim):
                        st.rerun()
                    st.error("That is not the teacher's token.", icon=":material/error:")
teacher = jm.is_teacher(owner)
if teacher:
    st.info("Teacher: you see and manage every session's jobs.", icon=":material/school:")
    everyone = True
else:
    everyone = ui.control(st, "jobs_class")
# Poll only while a job in this view is queued or running; a full rerun when they end turns it off.
polling = job_views.has_active(runs_store, owner, everyone)


@st.fragment(run_every=1.0 if polling else None)
def live() -> None:
    with ui.guarded("the job list"):
        live_view()


def live_view() -> None:
    jm.sweep()
    table = job_views.overview(runs_store, jm, owner, everyone=everyone, show_ids=teacher)
    if table.empty:
        st.info("No jobs yet: start one on the Training page." if everyone else
                "No jobs of yours yet: start one on the Training page (the switch above shows the whole class's).")
        return
    if polling and not table.status.isin(ACTIVE).any():
        st.rerun()
    for r in table[(table.owner == "you") & table.queue.notna()].itertuples():
        st.info(f"Your job {r.id} is number {int(r.queue)} in the queue.", icon=":material/hourglass_top:")
    recent = runs_store.stages(list(table.id[table.status.isin(ACTIVE)]))
    for rid, attempt, summary, action in job_views.alarm_lines(recent):
        st.error(f"Alarm, job {rid}, attempt {attempt}: {ui.plain(summary)} → {ui.plain(action)}",
                 icon=":material/notifications_active:")
    st.dataframe(job_views.shown_times(table), hide_index=True, key="jobs_table",
                 column_config=ui.column_config(job_views.JOB_COLUMNS))
    slots = job_views.slot_words(jm)
    ui.caption("measured", "Times are wall-clock (UTC) from the run store; 'waited' is submission to start, "
               f"'ran' start to end; resources are the {slots} the job manager gave it.")
    rows, _ = job_views.slot_timeline(runs_store, list(table.id[:20]))
    if rows:
        st.plotly_chart(figs.timeline_figure(rows, title=f"Which job held which of the {slots}, when",
                                             x_title="time since the first job shown was scheduled (s)"),
                        key="jobs_timeline")
        ui.caption("measured", "From each job's 'scheduled' and 'released' events.")
    labels = job_views.job_labels(table)
    pick = ui.control(st, "jobs_pick", options=list(labels), format_func=labels.get)
    details(pick)


def details(rid: str) -> None:
    run = runs_store.get_run(rid)
    st.subheader(f"Job {rid}")
    st.text(f"Name: {run['name']}")
    if jm.may_manage(run["info"].get("owner"), owner):
        b1, b2, _ = st.columns([1, 1, 4])
        if b1.button("Stop", key="jobs_stop", icon=":material/stop:", disabled=run["status"] not in ACTIVE):
            with ui.guarded("stopping the job"):
                jm.stop(rid, owner)
                st.rerun()
        if b2.button("Release", key="jobs_release", icon=":material/cleaning_services:",
                     disabled=run["status"] not in FINISHED,
                     help="Kill anything left of the job, delete its intermediate checkpoints (final.pt and logs stay)"):
            with ui.guarded("releasing the job"):
                done = jm.release(rid, owner)
                st.success(job_views.released_line(done))
    else:
        st.caption(job_views.read_only_line(run["info"].get("owner")))
    if run["info"].get("stopped_by"):
        st.text("Stopped by: " + job_views.stopped_by(run["info"]["stopped_by"], owner))
    if run["error"]:
        (st.warning if run["status"] == "stopped" else st.error)(ui.plain(run["error"].splitlines()[0]))
    ev = runs_store.stages(rid)
    if len(ev):
        st.plotly_chart(figs.stages_figure(ev.to_dict("records"), {rid: rid}), key="jobs_stages")
        st.dataframe(job_views.stage_table(ev), hide_index=True, key="jobs_stage_table",
                     column_config=ui.column_config(job_views.STAGE_COLUMNS))
        ui.caption("measured", "Lifecycle events as the job manager, the launcher and rank 0 recorded them.")
        where = job_views.rank_nodes(ev)
        if len(where):
            st.dataframe(where, hide_index=True, key="jobs_rank_nodes")
            ui.caption("measured", "Which node of the Ray cluster ran which rank (node: Ray's node id).")
    beats = runs_store.heartbeats(rid)
    if run["status"] == "running" and len(beats):
        st.plotly_chart(figs.heartbeat_figure(*job_views.heartbeat_ages(beats), heartbeat_timeout()), key="jobs_beats")
        ui.caption("measured", job_views.BEATS_CAPTION)
    tails = job_views.log_tails(jm, rid)
    if tails:
        st.markdown("**Log tail per worker**")
        for tab, (who, text) in zip(st.tabs(list(tails)), tails.items()):
            tab.code(text or "(empty)", language=None)


live()

# ---------------------------------------------------------------- what-if
st.header("What if: several jobs on a topology's resource groups")
st.markdown(job_views.whatif_intro(ui.badge("modelled")))
with ui.guarded("the scheduling what-if"):
    which = ui.control(st, "jobs_topo", format_func=lambda n: "the scenario's topology" if n == "scenario"
                       else PRESET_LABELS[n])
    topo = sc.topology if which == "scenario" else preset(which)
    groups = resource_groups(topo)
    st.dataframe(job_views.group_table(groups), hide_index=True, key="jobs_groups")
    default = pd.DataFrame(job_views.WHATIF_JOBS)
    types = ["any"] + sorted({g.type for g in groups})
    edited = ui.control(st, "jobs_whatif", data=default, num_rows="dynamic", hide_index=True,
                        column_config=ui.column_config(job_views.whatif_columns(types)))
    cap = ui.control(st, "jobs_maxrun")
    schedules, devices = job_views.whatif(groups, edited, cap)
    cols = st.columns(len(POLICIES))
    for col, p in zip(cols, POLICIES):
        s = schedules[p]
        col.plotly_chart(figs.timeline_figure(s.rows(), title=POLICY_LABELS[p], resources=devices,
                                              x_title="simulated time (s)"), key=f"jobs_sim_{p}")
        for label, value in job_views.whatif_metrics(s):
            col.metric(label, value)
        if s.unplaceable:
            col.warning("Too large for this policy even on the empty groups (never start): "
                        + ui.plain(", ".join(s.unplaceable)))
    ui.caption("modelled", job_views.WHATIF_CAPTION)
