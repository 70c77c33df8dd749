"""Training: real multi-process runs of the current scenario, watched live from the run store."""

import streamlit as st

import ui
from lab.figures import training as figs
from lab.jobs.comparison import comparison_compressions, comparison_scenarios, run_name, settings_of, student_seed
from lab.jobs import views as job_views
from lab.scenario.document import Compression
from lab.scenario.names import (ALLREDUCE_IMPL_LABELS, ALLREDUCE_IMPLS, COMPRESSORS, MODEL_LABELS, OPTIMIZER_LABELS,
                                OPTIMIZERS, SHARING, SPARSIFIERS, SPLIT_LABELS, SPLITS, SYNC_LABELS, SYNC_MODES)
from lab.store.runs import ACTIVE, JOB_WORKER, store
from lab.view.state import VIEW

sc = ui.scenario_sidebar()
lesson = ui.lesson_mode()  # hides the advanced controls
jm, owner = ui.job_manager()  # shared with the Jobs page; owner: this session, for the fair queue
runs_store = store()
st.title("Training")
st.markdown(
    "Each run is a real job: N worker processes on this machine train the model over torch.distributed "
    f"(gloo), and every number below is {ui.badge('measured')} from them. With emulation on, a worker standing "
    "for a slower device of the topology waits in proportion to its measured compute, and the lab's ring waits "
    f"the modelled transfer time on each link: those waits are {ui.badge('emulated')} and shown apart.")

# ---------------------------------------------------------------- settings -> scenario
tr = sc.training
# Two select boxes a row: their choices are long, and a 1024-pixel projector must show them whole.
c1, c2 = st.columns(2)
c3, c4 = st.columns(2)
optimizer = c1.selectbox("Optimiser", OPTIMIZERS, OPTIMIZERS.index(tr.optimizer), key="tr_optimizer",
                         format_func=OPTIMIZER_LABELS.get)
model = c2.selectbox("Model", list(MODEL_LABELS), list(MODEL_LABELS).index(tr.model), key="tr_model",
                     format_func=MODEL_LABELS.get)
sync = c3.selectbox("Sync mode", SYNC_MODES, SYNC_MODES.index(tr.sync), key="tr_sync", format_func=SYNC_LABELS.get)
impl = tr.allreduce_impl if lesson else c4.selectbox(
    "All-reduce", ALLREDUCE_IMPLS, ALLREDUCE_IMPLS.index(tr.allreduce_impl), key="tr_impl",
    format_func=ALLREDUCE_IMPL_LABELS.get)
c1, c2, c3, c4, c5 = st.columns(5)
workers = c1.slider("Workers (processes)", 1, 4, tr.workers, key="tr_workers")
steps = c2.number_input("Steps (count)", 1, 100_000, tr.steps, key="tr_steps")
batch = c3.number_input("Batch per worker (samples)", 1, 4096, tr.batch_size, key="tr_batch")
lr = c4.number_input("Learning rate", 0.0, 10.0, float(tr.lr), format="%.5f", key="tr_lr")
seed = tr.seed if lesson else c5.number_input("Seed", 0, 2**31 - 1, tr.seed, key="tr_seed")
split, alpha, exchange, lr_scaling = tr.split, tr.dirichlet_alpha, tr.exchange_share, tr.lr_scaling
if not lesson:
    c1, c2, c3, c4 = st.columns(4)
    split = c1.selectbox("Data split", SPLITS, SPLITS.index(tr.split), key="tr_split", format_func=SPLIT_LABELS.get)
    alpha = c2.number_input("Dirichlet alpha", 0.001, 1000.0, float(tr.dirichlet_alpha), key="tr_alpha",
                            disabled=split != "dirichlet", help="small: each worker sees few classes")
    exchange = c3.number_input("Exchange share per step", 0.0, 1.0, float(tr.exchange_share), key="tr_exchange",
                               help="share of its samples each worker hands its ring neighbour each step (the task-level design's data exchange)")
    lr_scaling = c4.checkbox("Scale lr by workers", tr.lr_scaling, key="tr_lr_scaling",
                             help="the edge-compression design's linear scaling rule: lr × workers")
emulate = st.toggle("Emulate the topology's devices and links", tr.emulate, key="tr_emulate")
devices = list(tr.worker_devices)
if emulate or split == "weighted":
    names = sc.topology.device_names
    cols = st.columns(workers + (1 if sync == "param_server" else 0))
    devices = [cols[i].selectbox(f"Worker {i} device" if i < workers else "Server device", names,
                                 job_views.default_device(names, devices, i), key=f"tr_dev_{i}")
               for i in range(len(cols))]
# The same compression settings the Compression page edits (sc.training.compression).
cp = tr.compression
c1, c2, c3 = st.columns(3)
c4, c5 = st.columns([2, 1], vertical_alignment="bottom")
kind = c1.selectbox("Compressor", COMPRESSORS, COMPRESSORS.index(cp.kind), key="tr_cmp_kind",
                    format_func=figs.COMPRESSOR_NAMES.get, help="what each worker sends of its gradient each step")
ratio = c2.number_input("Ratio (kept fraction)", 1e-6, 1.0, float(cp.ratio), step=0.001, format="%.6f",
                        key="tr_cmp_ratio", disabled=kind not in SPARSIFIERS, help="0.01 keeps 1 % of the entries")
group_size, feedback, sharing = cp.group_size, cp.error_feedback, cp.sharing
if not lesson:
    group_size = c3.number_input("Group size (entries)", 1, 1 << 24, int(cp.group_size), key="tr_cmp_group",
                                 disabled=kind != "group_topk", help="Group-TopK keeps the top entries of every group")
    sharing = c4.selectbox("Sharing method", SHARING, SHARING.index(cp.sharing), key="tr_cmp_sharing",
                           format_func=figs.SHARING_NAMES.get, disabled=kind == "none")
    feedback = c5.checkbox("Error feedback", cp.error_feedback, key="tr_cmp_ef", disabled=kind == "none",
                           help="adds what was not sent to the next step's gradient, so it is sent later")
with ui.guarded("the training settings"):
    new = tr.replace(optimizer=optimizer, model=model, sync=sync, allreduce_impl=impl, workers=workers, steps=steps,
                     batch_size=batch, lr=lr, seed=seed, split=split, dirichlet_alpha=alpha, exchange_share=exchange,
                     lr_scaling=lr_scaling, emulate=emulate, worker_devices=tuple(devices),
                     compression=Compression(kind=kind, ratio=float(ratio), group_size=int(group_size),
                                             error_feedback=bool(feedback), sharing=sharing))
    if new != tr:
        sc = sc.replace(training=new)
        ui.set_scenario(sc)

comp_now = sc.training.compression
st.markdown(f":material/compress: **Compression:** {ui.plain(figs.compression_summary(comp_now.to_dict()))}")
if conflict := job_views.compression_conflict(sc.training):
    st.warning(conflict, icon=":material/warning:")


b1, b2, b3 = st.columns([1, 3, 2], vertical_alignment="bottom")
if b1.button("Run", type="primary", key="train_run", icon=":material/play_arrow:"):
    with ui.guarded("starting the run"):
        if jobs := ui.submit_once(owner, sc, "run", runs_store, lambda: [
                jm.submit(sc, name=run_name(settings_of(sc.to_dict())), owner=owner)]):
            st.session_state["train_watch"] = jobs[0].run_id
            st.rerun()
repeats = VIEW["tr_repeats"].spec.default if lesson else b3.number_input(
    "Repeats (seeds)", 1, 10, key="tr_repeats", help="each variant runs with this many seeds, so its noise shows")
if b2.button("Compare optimisers × compression", key="train_compare", icon=":material/compare_arrows:",
             help="Queues Adam, AdaBelief and Max-AdaBelief, each without compression and with the compression "
                  "above (Group-TopK 1 % with error feedback when none is chosen), each with several seeds; "
                  "then opens the Compare page on exactly those runs"):
    with ui.guarded("queueing the comparison"):
        items = comparison_scenarios(sc, comparison_compressions(sc.training.compression), int(repeats),
                                     first_seed=student_seed(sc.training.seed, owner))
        if jobs := ui.submit_once(owner, sc, f"compare x{repeats}", runs_store, lambda: jm.submit_many(items, owner=owner)):
            st.session_state["train_watch"] = jobs[0].run_id
            ui.set_view("cmp_runs", [j.run_id for j in jobs])
            st.switch_page("pages/compare.py")


# ---------------------------------------------------------------- live view
# Poll the store every second while a job is queued or running; a full rerun when they all end
# turns the polling off again. A submit still under way (a double click) polls too, so its run shows.
polling = ui.submit_book().pending(owner) or bool(len(runs_store.list_runs(statuses=ACTIVE, owner=owner)))  # this session's


@st.fragment(run_every=1.0 if polling else None)
def live() -> None:
    with ui.guarded("the live view"):  # inside: the fragment also reruns on its own
        live_view()


def live_view() -> None:
    jm.sweep()  # a run whose launcher died without a word becomes interrupted
    runs = runs_store.list_runs(owner=owner)  # this session's runs: the class's are on the Jobs page
    if runs.empty:
        st.info("No runs yet: press **Run**.")
        if polling and not ui.submit_book().pending(owner):
            st.rerun()
        return
    active = runs[runs.status.isin(ACTIVE)]
    if polling and not len(active) and not ui.submit_book().pending(owner):
        st.rerun()
    if len(active):
        st.caption(f"Active jobs: {', '.join(f'{r.id} ({r.status})' for r in active.itertuples())}. "
                   f"At most {jm.capacity} run(s) at a time; the others wait in a queue that takes every session in turn.")
    watch = job_views.run_to_watch(runs, st.session_state.get("train_watch"))
    run = runs_store.get_run(watch)
    tr_w = run["scenario"]["training"]
    queue = jm.queue_info(watch) if run["status"] == "queued" else None
    place = queue["position"] if queue else None
    if queue is not None:
        whose = "Your job" if run["info"].get("owner") == owner else "This job (another session's)"
        st.info(f"{whose}: {job_views.queue_line(runs_store, queue)}", icon=":material/hourglass_top:")
    done = runs_store.progress(watch)
    st.subheader(f"Run {watch}")
    # From the stored run's own settings: the controls above may have changed since it was queued.
    st.markdown(":material/compress: **Compression in this run:** "
                + ui.plain(figs.compression_summary(tr_w.get("compression", {}))))
    st.progress(min(1.0, done / tr_w["steps"]), text=job_views.progress_line(runs_store, run, place))
    if run["status"] in ("queued", "running") and st.button("Stop", key=f"train_stop_{watch}", icon=":material/stop:"):
        with ui.guarded("stopping the run"):
            jm.stop(watch, owner)
            st.rerun()
    if run["status"] in ("failed", "diverged", "interrupted") and run["error"]:
        st.error(ui.plain(f"This run {run['status']}: {run['error'].splitlines()[0]}"), icon=":material/error:")
    elif run["status"] == "stopped":
        st.warning(ui.plain(run["error"] or "stopped"))
    m = runs_store.metrics(watch)
    if m.empty:
        st.caption("Waiting for the first measurements…")
        return
    job, per = m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER]
    left, right = st.columns(2)
    left.plotly_chart(figs.loss_figure({watch: job}), key="train_loss")
    right.plotly_chart(figs.accuracy_figure({watch: job}), key="train_acc")
    ui.caption("measured", f"Loss of each step over the combined batch of all workers; test accuracy on the held-out "
               f"set every {tr_w['eval_every']} steps.")
    if len(per):
        info = run["info"]
        st.plotly_chart(figs.time_split_figure(per, job_views.worker_labels(info, per.worker.unique())),
                        key="train_split")
        ui.caption("emulated" if tr_w["emulate"] else "measured",
                   "Seconds per worker so far. Idle: how much earlier this worker was ready to communicate than the "
                   "slowest one. Hatched: emulated waits (device slower than this machine; modelled link times). "
                   + job_views.bytes_note(info))
        tot = job_views.run_totals(job, per)
        c1, c2, c3 = st.columns(3)
        c1.metric("Wall time (s)", f"{tot['wall_s']:.2f}")
        c2.metric("Throughput (samples/s)", "–" if tot["samples_per_s"] is None else f"{tot['samples_per_s']:,.0f}")
        c3.metric(f"Sent by all workers (MB, {info.get('bytes_kind', 'measured')})", f"{tot['sent_mb']:.2f}")
    if run["status"] == "done":
        with ui.guarded("the prediction"):
            ui.prediction_beside_measured(runs_store, watch, key="train_pred")


live()
