"""All-reduce: what each device sends at each step, how long that takes on this cluster, and a real measurement."""

import streamlit as st

import ui
from lab.modelled import collectives as C
from lab.machine.profile import load_profile
from lab.machine.fit import profile_errors
from lab.comm import measure as M
from lab.figures import allreduce as figs
from lab.figures.fidelity import add_profile_models
from lab.figures.style import fmt_rate, fmt_seconds, time_unit
from lab.view import allreduce as tables
from lab.view.state import ALLREDUCE_SIZES, VIEW, fit_range, fit_subset

sc = ui.scenario_sidebar()
lesson = ui.lesson_mode()  # hides the advanced controls and tables
topo = sc.topology
st.title("All-reduce")
st.markdown("Every device holds a gradient buffer of S bytes; an all-reduce leaves the sum on every device. Step "
            "through the **ring** (the CXL design's worked example of four devices: reduce-scatter, then all-gather), **host aggregation**, a "
            "binary **tree** and a two-level **hierarchical** all-reduce (inside each pool or resource group, then "
            "among the group leaders). Times come from the alpha-beta model on the topology's links: a message costs "
            "its route's latency plus bytes over the narrowest bandwidth on the route, a link crossed by k messages "
            "at once in one direction gives each 1/k, a step lasts as long as its slowest message.")
SIZES = list(ALLREDUCE_SIZES)

c1, c2 = st.columns(2)  # two columns and the ring below them: a 1024-pixel projector shows them whole
# A lesson may hide a control for a focused exercise (ui.hidden): its value from the lesson stays in force.
source = ui.control(c1, "ar_source",
                    format_func={"topology": "of the scenario's topology", "identical": "N identical devices"}.get)
if source == "topology":
    chosen_before = tuple(ui.view_value("ar_devices") or ())
    fitted, changed = fit_subset(chosen_before, topo.device_names, C.default_participants(topo))
    if changed:  # a new topology, or a link's default: take the devices that still exist, else its defaults
        ui.set_view("ar_devices", fitted, notice=None if not chosen_before else
                    "The topology changed, so the devices taking part are now: " + ", ".join(fitted) + ".")
    names = ui.control(c1, "ar_devices", options=topo.device_names)
    cluster = topo
else:
    n = ui.control(c1, "ar_n")
    bw = VIEW["ar_bw"].spec.default if lesson else ui.control(c1, "ar_bw")
    lat = VIEW["ar_lat"].spec.default if lesson else ui.control(c1, "ar_lat")
    cluster, names = C.uniform_star(n, bw * 1e9, lat * 1e-6), C.default_names(n)
alg = ui.control(c2, "ar_alg")
nbytes = ui.control(c2, "ar_size", format_func=M.human_bytes)
c3 = st.container()
order_mode = ui.control(c3, "ar_order", format_func={"given": "as listed", "lab": "the lab's: widest slowest hop"}.get)

setup = None
with ui.guarded("the all-reduce set-up"):
    C.check_explored(names)
    given, best = C.given_ring_order(cluster, names), C.best_ring_order(cluster, names)
    chosen = best if order_mode == "lab" else given
    setup = C.Setup(tuple(names), tuple(names.index(x) for x in chosen.names),
                    tuple(map(tuple, C.topology_groups(cluster, names))), C.default_host(cluster, names))
    c3.markdown(f"{ui.badge('modelled')} Ring: {ui.plain(' → '.join([*chosen.names, chosen.names[0]]))}  \n"
                f"Slowest hop: as listed "
                f"**{fmt_rate(given.slowest_hop_bandwidth)}**, lab's order **"
                f"{fmt_rate(best.slowest_hop_bandwidth)}** ({best.method}; links shared by hops counted).")
    c3.caption(f"Host aggregation: **{ui.plain(setup.host)}**. Groups: "
               + ui.plain("; ".join(", ".join(g) for g in setup.groups)) + ".")

if setup is not None:
    st.subheader("Step by step")
    with ui.guarded("the step-through"):
        sched = setup.schedule(alg, nbytes, with_state=True)
        step_now, clamped = fit_range(ui.view_value("ar_step") or 0, 0, len(sched.steps))
        if clamped:
            ui.set_view("ar_step", step_now, notice=f"This schedule has {len(sched.steps)} steps, so the step "
                                                    f"is now {step_now}.")
        if st.session_state.get("ar_play") and step_now >= len(sched.steps):
            # Play pressed at the last step plays again from the first: the tick below must never have to
            # switch the play off inside a full run, where its switch is already drawn.
            ui.set_view("ar_step", 0)
        playing = ui.control(st, "ar_play")

        @st.fragment(run_every=0.9 if playing else None)
        def step_through() -> None:
            if st.session_state.get("ar_play"):  # one step further each tick; at the end the play stops
                nxt = (ui.view_value("ar_step") or 0) + 1
                if nxt > len(sched.steps):
                    st.session_state["ar_play"] = False
                    st.rerun()
                ui.set_view("ar_step", nxt)
            step = ui.control(st, "ar_step", hi=len(sched.steps))
            ui.remember("ar_step", step)
            st.plotly_chart(figs.step_figure(sched, step, C.ALGORITHM_LABELS[alg]), key="ar_steps")
            ui.caption("modelled", "the schedule itself: arrows are the messages of the chosen step (red = added into "
                                   "the receiver's chunk, blue = copied over it); the grid shows the contributions "
                                   "every device holds per chunk. The slider is the one step control: ▶ plays it.")
            if step:
                st.dataframe(tables.transfers_table(sched, step), hide_index=True, key="ar_transfers")

        step_through()
        st.dataframe(tables.bytes_table(sched, nbytes), hide_index=True, key="ar_bytes")
        ui.caption("modelled", tables.ring_bytes_sentence(len(names)))

    st.subheader("How long on this cluster")
    with ui.guarded("the time model"):
        est = C.schedule_time(setup.schedule(alg, nbytes), cluster)
        m1, m2, m3 = st.columns(3)
        m1.metric("Modelled time", fmt_seconds(est.seconds))
        m2.metric("algbw", fmt_rate(est.algbw))
        m3.metric("busbw", fmt_rate(est.busbw))
        rates = {m.bandwidth for s in est.steps for m in s.messages if m.nbytes > 0}
        st.markdown(f"**Slowest link: {ui.plain(C.link_label(cluster, est.bottleneck))}**, the narrowest hop of the slowest "
                    f"message in steps taking {100 * est.bottleneck_seconds / max(est.seconds, 1e-30):.0f}% of "
                    "the time" + (" (every message gets the same bandwidth here, so this is the first of equals)."
                                  if len(rates) == 1 else "."))
        ui.caption("modelled", "algbw and busbw as nccl-tests defines them for all-reduce (S = buffer per device, "
                               "t = time, N = devices):")
        st.latex(C.BANDWIDTH_FORMULA)
        scale, unit = time_unit(max(s.seconds for s in est.steps))
        if not lesson:
            st.dataframe(tables.step_times_table(est, scale, unit), hide_index=True, key="ar_step_times")
            ui.caption("modelled", "every step of the chosen algorithm; a step lasts as long as its slowest message.")
        rows = C.compare_algorithms(cluster, setup, nbytes)
        st.dataframe(tables.algorithms_table(rows), hide_index=True, key="ar_compare")
        ui.caption("modelled", f"all four algorithms at S = {M.human_bytes(nbytes)} on {ui.plain(cluster.name)}.")
        curves = {a: (a, setup) for a in C.ALGORITHMS}
        curves["ring (lab order)"] = ("ring", C.Setup(setup.participants, tuple(names.index(x) for x in best.names),
                                                      setup.groups, setup.host))
        g1, g2 = st.columns(2)
        g1.plotly_chart(figs.time_vs_size_figure(C.sweep_sizes(cluster, curves, SIZES), "time against buffer size"),
                        key="ar_vs_size")
        g2.plotly_chart(figs.time_vs_n_figure(C.sweep_devices(cluster, curves, nbytes),
                                              f"time against N (first N devices), S = {M.human_bytes(nbytes)}"),
                        key="ar_vs_n")
        ui.caption("modelled", "on the chosen devices' links; against N, the first N devices of the ring order.")
        if not lesson:
            alpha = max(cluster.path(a, b).latency for a, b in zip(chosen.names, chosen.names[1:] + chosen.names[:1]))
            beta = 1 / chosen.slowest_hop_bandwidth
            ns = [2 ** k for k in range(1, 11)]
            st.plotly_chart(figs.time_vs_n_figure(C.sweep_uniform(ns, nbytes, alpha, beta),
                                                  f"uniform model up to N = 1024: t = steps·α + bytes·β, α = "
                                                  f"{fmt_seconds(alpha)}, β = 1/({fmt_rate(1 / beta)})",
                                                  log_x=True), key="ar_uniform")
            ui.caption("modelled", "no real topology is this large: every device on its own switch port with this "
                                   "ring's slowest hop (α its largest hop latency); ring 2(N−1) steps of S/N, host 2 "
                                   "steps of N·S through the host's port, tree 2·log2 N levels of up to 2·S.")

if setup is not None and not lesson:
    st.subheader("Synchronous or asynchronous trigger")
    with ui.guarded("the trigger timeline"):
        gflop = ui.control(st, "ar_work")
        comp = C.compute_times(cluster, names, gflop * 1e9)
        edited = ui.control(st, "ar_compute", data=tables.compute_table(names, comp), hide_index=True,
                            disabled=["device"])
        comp = tables.compute_from_table(edited)
        plain = setup.schedule(alg, nbytes)
        tls = {m: C.trigger_timeline(plain, cluster, comp, m) for m in ("sync", "async")}
        scale, unit = time_unit(max(t.makespan for t in tls.values()))
        st.plotly_chart(figs.trigger_figure(tls, scale, unit), key="ar_trigger")
        st.dataframe(tables.idle_table(tls, plain.nodes, scale, unit), hide_index=True, key="ar_idle")
        ui.caption("modelled", "sync: the host starts the all-reduce when the last device is done; async: each "
                               "device starts when it is done and waits only for the devices it exchanges with. "
                               "Compute time = work / the device's matmul FLOP/s (edit the table); messages take "
                               "their lock-step times; idle = neither computing nor communicating; blue over grey = a "
                               "message arriving while the device still computes. A ring waits for its slowest "
                               "device either way: async saves only what can move before it is done.")

if setup is not None:
    st.subheader("Measured on this machine")
    st.markdown("Real processes on this machine's CPU (gloo over loopback): the lab's ring (`lab.comm.ring_allreduce`, "
                "isend/irecv) beside gloo's own `all_reduce`, each size after a warm-up, median over iterations of "
                "the slowest process. The α-β model is then fitted to these times (least squares on relative error, "
                "t = 2(N−1)·α + 2(N−1)/N·S·β). The same from a shell: `python -m lab.comm.measure --procs 4`.")
    k1, k2, k3 = st.columns(3)
    procs = ui.control(k1, "ar_procs")
    top = VIEW["ar_top"].spec.default if lesson else ui.control(k2, "ar_top", format_func=M.human_bytes)
    iters = VIEW["ar_iters"].spec.default if lesson else ui.control(k3, "ar_iters")
    if st.button("Run the measurement", key="ar_measure", icon=":material/speed:"):
        with ui.guarded("the measurement"):
            bar = st.progress(0.0, "starting the processes")
            st.session_state["ar_rows"] = M.measure(
                procs, M.sizes_between(4096, top, 4), int(iters), warmup=1, timeout=90, op_timeout=30,
                progress=lambda d, t, r: bar.progress(d / t, f"{d} of {t}: {r['impl']} at {M.human_bytes(r['size'])}"))
    measured = st.session_state.get("ar_rows")
    if measured:
        with ui.guarded("the measured results"):
            fits = {impl: M.fit_rows(measured, impl) for impl in M.IMPLS}
            fig = figs.measured_vs_model_figure(measured, fits, f"{measured[0]['procs']} processes")
            prof = load_profile()  # the saved machine profile's alpha-beta (Fidelity page) beside this fit
            pfits = prof.measured_allreduce.get(str(measured[0]["procs"]), {}) if prof is not None else {}
            note = ""
            if pfits:
                add_profile_models(fig, pfits, sorted({r["size"] for r in measured}), measured[0]["procs"], prof.created)
                errs = profile_errors(pfits, measured)
                note = (f"; dotted: the saved machine profile's α-β (modelled, calibrated {prof.created[:16]}), "
                        "its error against these measurements " + ", ".join(f"{i} {e * 100:.0f}%" for i, e in errs.items()))
            st.plotly_chart(fig, key="ar_measured")
            ui.caption("measured", "markers: median time (bars: fastest and slowest iteration); dashed lines: the "
                                   "fitted α-β model (modelled)" + note + ".")
            st.dataframe(tables.measured_table(measured, fits, M.IMPL_LABELS), hide_index=True,
                         key="ar_measured_table")
            st.markdown(" ".join(f"**{impl}**: α = {f.alpha * 1e6:.3g} µs, β = {f.beta * 1e9:.3g} ns/B "
                                 f"(≈ {fmt_rate(f.bandwidth)}), geometric-mean error "
                                 f"**{100 * f.geomean_error:.1f}%**." for impl, f in fits.items()))
            ui.caption("measured", f"times, algbw and busbw are measured; the modelled column and the errors come "
                                   f"from the fit. {C.GEOMEAN_ERROR_DEFINITION}.")
