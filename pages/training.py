"""Training: real multi-process runs of the current scenario, watched live from the run store."""

import streamlit as st

import ui
from lab.figures import training as figs
from lab.jobs.variants import comparison_compressions, comparison_scenarios, run_name, settings_of, student_seed
from lab.view import jobs as job_views
from lab.scenario.document import COMPRESSION_FIELDS as C
from lab.scenario.document import TRAINING_FIELDS as T
from lab.scenario.document import Compression
from lab.scenario.names import PAYLOAD_COMPRESSORS, SPARSIFIERS
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
# Every control's label, bounds and help are the Scenario's table's (TRAINING_FIELDS, COMPRESSION_FIELDS).
# Two select boxes a row: their choices are long, and a 1024-pixel projector must show them whole.
c1, c2 = st.columns(2)
c3, c4 = st.columns(2)
optimizer = ui.setting(c1, T["optimizer"], tr.optimizer, "tr_optimizer")
model = ui.setting(c2, T["model"], tr.model, "tr_model")
sync = ui.setting(c3, T["sync"], tr.sync, "tr_sync")
impl = tr.allreduce_impl if lesson else ui.setting(c4, T["allreduce_impl"], tr.allreduce_impl, "tr_impl")
c1, c2, c3, c4, c5 = st.columns(5)
workers = ui.setting(c1, T["workers"], tr.workers, "tr_workers")
steps = ui.setting(c2, T["steps"], tr.steps, "tr_steps")
batch = ui.setting(c3, T["batch_size"], tr.batch_size, "tr_batch")
lr = ui.setting(c4, T["lr"], tr.lr, "tr_lr")
seed = tr.seed if lesson else ui.setting(c5, T["seed"], tr.seed, "tr_seed")
split, alpha, exchange, lr_scaling = tr.split, tr.dirichlet_alpha, tr.exchange_share, tr.lr_scaling
if not lesson:
    c1, c2, c3, c4 = st.columns(4)
    split = ui.setting(c1, T["split"], tr.split, "tr_split")
    alpha = ui.setting(c2, T["dirichlet_alpha"], tr.dirichlet_alpha, "tr_alpha", disabled=split != "dirichlet")
    exchange = ui.setting(c3, T["exchange_share"], tr.exchange_share, "tr_exchange")
    lr_scaling = ui.setting(c4, T["lr_scaling"], tr.lr_scaling, "tr_lr_scaling")
c1, c2 = st.columns(2)
emulate = ui.setting(c1, T["emulate"], tr.emulate, "tr_emulate")
fused = tr.fused if lesson else ui.setting(c2, T["fused"], tr.fused, "tr_fused")
devices = list(tr.worker_devices)
if emulate or split == "weighted":
    names = sc.topology.device_names
    cols = st.columns(workers + (1 if sync == "param_server" else 0))
    devices = [ui.control(cols[i], f"tr_dev_{i}", options=names, value=names[job_views.default_device(names, devices, i)],
                          label=f"Worker {i} device" if i < workers else "Server device")
               for i in range(len(cols))]
# The same compression settings the Compression page edits (sc.training.compression).
cp = tr.compression
c1, c2, c3 = st.columns(3)
c4, c5 = st.columns([2, 1], vertical_alignment="bottom")
kind = ui.setting(c1, C["kind"], cp.kind, "tr_cmp_kind", format_func=figs.COMPRESSOR_NAMES.get)
group_size, feedback, sharing, rank, warmup = cp.group_size, cp.error_feedback, cp.sharing, cp.rank, cp.warmup
if kind == "powersgd":  # torch's hook takes a rank and a warm-up where the lab's compressors take a ratio
    rank = ui.setting(c2, C["rank"], cp.rank, "tr_cmp_rank")
    warmup = ui.setting(c3, C["warmup"], cp.warmup, "tr_cmp_warmup")
    ratio = cp.ratio
else:
    ratio = ui.setting(c2, C["ratio"], cp.ratio, "tr_cmp_ratio", disabled=kind not in SPARSIFIERS)
if not lesson and kind != "powersgd":
    group_size = ui.setting(c3, C["group_size"], cp.group_size, "tr_cmp_group", disabled=kind != "group_topk")
if not lesson:
    own = kind in PAYLOAD_COMPRESSORS and kind != "none"  # torch's hooks send by their own all-reduces
    sharing = ui.setting(c4, C["sharing"], cp.sharing, "tr_cmp_sharing", format_func=figs.SHARING_NAMES.get,
                         disabled=not own)
    feedback = ui.setting(c5, C["error_feedback"], cp.error_feedback, "tr_cmp_ef", disabled=not own)
with ui.guarded("the training settings"):
    new = tr.replace(optimizer=optimizer, model=model, sync=sync, allreduce_impl=impl, workers=workers, steps=steps,
                     batch_size=batch, lr=lr, seed=seed, split=split, dirichlet_alpha=alpha, exchange_share=exchange,
                     lr_scaling=lr_scaling, emulate=emulate, fused=fused, worker_devices=tuple(devices),
                     compression=Compression(kind=kind, ratio=float(ratio), group_size=int(group_size),
                                             error_feedback=bool(feedback), sharing=sharing, rank=int(rank),
                                             warmup=int(warmup)))
    if new != tr:
        sc = sc.replace(training=new)
        ui.set_scenario(sc)

comp_now = sc.training.compression
st.markdown(f":material/compress: **Compression:** {ui.plain(figs.compression_summary(comp_now.to_dict()))}")
if conflict := job_views.compression_conflict(sc.training):
    st.warning(conflict, icon=":material/warning:")
st.caption(job_views.IMPLEMENTATIONS)


b1, b2, b3 = st.columns([1, 3, 2], vertical_alignment="bottom")
if b1.button("Run", type="primary", key="train_run", icon=":material/play_arrow:"):
    with ui.guarded("starting the run"):
        if jobs := ui.submit_once(owner, sc, "run", runs_store, lambda: [
                jm.submit(sc, name=run_name(settings_of(sc.to_dict())), owner=owner)]):
            st.session_state["train_watch"] = jobs[0].run_id
            st.rerun()
repeats = VIEW["tr_repeats"].spec.default if lesson else ui.control(b3, "tr_repeats")
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
    st.markdown(":material/function: **Optimiser in this run:** " + ui.plain(figs.optimiser_summary(tr_w)))
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
