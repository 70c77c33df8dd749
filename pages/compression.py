"""Compression: Group-TopK and its sparse ring, byte-true accounting, and the Cholesky claim tested."""

import numpy as np
import pandas as pd
import streamlit as st
import torch

import ui
from lab.compression import cholesky as chol
from lab.scenario.names import SHARING_LABELS, Sharing
from lab.view.sharing import sharing_report
from lab.scenario.names import COMPRESSOR_LABELS
from lab.compression.study import evaluate, generated_gradients, real_gradients
from lab.figures import compression as figs
from lab.figures.style import fmt_seconds
from lab.store.runs import ACTIVE, store
from lab.scenario.document import Compression
from lab.jobs.grid import grid_results, grid_scenarios, grid_table, variant_label, where_each_wins
from lab.view.state import VIEW

sc = ui.scenario_sidebar()
lesson = ui.lesson_mode()  # hides the advanced controls
comp = sc.training.compression
st.title("Compression")
st.markdown(
    "The edge-compression design's **Group-TopK** keeps, in every group of *group size* consecutive gradient entries, the "
    "*ratio × group size* entries of largest magnitude, and shares the sparse result round a ring. Here it "
    "stands beside global Top-K, Random-K and FP16 on a real gradient, with every byte counted from the "
    "payload as it is really serialised (fp32 value + uint16 in-group offset: 6 B per kept entry for "
    "Group-TopK, 8 B with int32 indices for the others, plus a 24 B header). Error feedback, which adds what "
    "was not sent to the next gradient, is part of `lab.compression.compressors` and of the training job.")


@st.cache_data(show_spinner="Computing gradients…", max_entries=8)
def gradients(source: str, model: str, n: int, workers: int, batch: int, seed: int) -> list[np.ndarray]:
    gs = (real_gradients(model, workers, batch, seed) if source == "real"
          else generated_gradients(n, workers, seed))
    return [g.numpy() for g in gs]


@st.cache_data(show_spinner="Compressing…", max_entries=8)
def table(grad: np.ndarray, group_size: int, ratios: tuple, seed: int) -> list[dict]:
    return evaluate(torch.from_numpy(grad), ratios=ratios, group_size=group_size, seed=seed)


@st.cache_data(show_spinner="Simulating the ring…", max_entries=8)
def ring(grads: list, kind: str, ratio: float, group_size: int, seed: int):
    return sharing_report(grads, kind, ratio, group_size, seed)


@st.cache_data(show_spinner="Factorising and timing…", max_entries=8)
def cholesky_study(seed: int, batch: int, damping: float, workers: int, by_class: bool, name: str) -> dict:
    return chol.study(chol.example_matrices(seed, batch, damping, workers, by_class)[name])


# ---------------------------------------------------------------- compressors on one gradient
st.header("Compressors on one gradient")
with st.form("cp_form"):
    c1, c2 = st.columns(2)
    c3, c4 = st.columns(2)
    source = ui.control(c1, "cp_source",
                        format_func={"real": "real (one backward pass on digits)", "generated": "generated"}.get)
    model = ui.control(c2, "cp_model")
    n = ui.control(c3, "cp_n")
    batch = ui.control(c4, "cp_batch")
    c1, c2, c3 = st.columns([1, 1, 2])
    group_size, seed = int(min(comp.group_size, 65536)), int(sc.training.seed)
    if not lesson:
        group_size = ui.control(c1, "cp_group")
        seed = ui.control(c2, "cp_seed")
    ratios = ui.control(c3, "cp_ratios")
    st.form_submit_button("Compute", type="primary", key="cp_run")

rows = []
with ui.guarded("the compressor comparison"):
    grads0 = gradients(source, model, int(n), 1, int(batch), int(seed))
    rows = table(grads0[0], int(group_size), tuple(sorted(ratios)), int(seed))
    st.markdown(f"Gradient: **{grads0[0].size:,} entries** ({grads0[0].size * 4 / 1e3:,.1f} kB as fp32).")
    if skipped := sorted(set(ratios) - {r["ratio"] for r in rows if r["compressor"] == "group_topk"}):
        st.warning(f"Group-TopK skipped ratio(s) {skipped}: ratio × group size {group_size} rounds to k = 0.")
    left, right = st.columns(2)
    left.plotly_chart(figs.density_error_figure(rows), key="cp_err_fig")
    with left:
        ui.caption("measured", "Relative error of the decompressed gradient against the original (L2 norms), "
                   "computed on this gradient. Global Top-K is the best any k entries can do; Group-TopK pays "
                   "for its per-group quota; Random-K ignores magnitudes.")
    right.plotly_chart(figs.time_figure(rows), key="cp_time_fig")
    with right:
        ui.caption("measured", "Compression time on this machine (best of 3; the CPU is shared, so expect "
                   "noise). bench/bench_compress.py times Group-TopK against global torch.topk on 25 M entries.")
    st.plotly_chart(figs.bytes_figure(rows), key="cp_bytes_fig")
    ui.caption("measured", "Bytes of each payload, equal to the length of its real serialisation (tested).")
    st.dataframe(pd.DataFrame(figs.compressor_table(rows)), hide_index=True, key="cp_table")

# ---------------------------------------------------------------- the ring and its fill-in
st.header("Sharing across workers: the edge-compression design's sparse ring and its fill-in")
st.markdown(
    "Each worker cuts its sparse gradient into N blocks. In the reduce-scatter (hops a1 … a(N−1)) a block "
    "travels round the ring and every worker adds its own entries to it; the sum of sparse vectors has the "
    "union of their supports, so the block **fills in** as it goes. In the all-gather (b1 …) the finished "
    "blocks go round unchanged. The alternative the published compression systems use is to all-gather "
    "every worker's payload as it is and let each worker add them up.")
with st.form("ring_form"):
    c1, c2, c3 = st.columns([1, 2, 1])
    workers = ui.control(c1, "ring_workers")
    kind = ui.control(c2, "ring_kind")
    ratio = ui.control(c3, "ring_ratio")
    st.form_submit_button("Simulate", type="primary", key="ring_run")

with ui.guarded("the ring simulation"):
    grads = gradients(source, model, int(n), int(workers), int(batch), int(seed))
    fill, hop_rows, sharing = ring(grads, kind, float(ratio), int(group_size), int(seed))
    st.plotly_chart(figs.fill_in_figure(fill, hop_rows), key="ring_fill_fig")
    ui.caption("modelled", "Simulated in one process: the ring's own schedule code (lab.comm.sparse) run for "
               f"{workers} workers on these gradients (different digits batches, or generated with a shared "
               "part). The entries and bytes are exact counts; the tests check that real processes over gloo "
               "send exactly these bytes. Dotted: the sum of the workers' entries in the block (no overlap).")
    st.plotly_chart(figs.sharing_bytes_figure(sharing["methods"]), key="ring_bytes_fig")
    ui.caption("modelled", "Bytes each worker sends per step, counted by the same simulation (8 B count before "
               "every message; ring pairs at 8 B, all-gather payloads in their own format). Dense: the lab's "
               "ring all-reduce of the decompressed fp32 tensor.")
    st.markdown(f"Each worker kept **{sharing['kept_per_worker'][0]:,}** entries; their sum has "
                f"**{sharing['support']:,}** non-zero entries ({sharing['support'] / grads[0].size:.2%} density).")
    if st.button("Use this compressor, ratio and group size in the scenario", key="ring_apply"):
        c = Compression.from_dict({**comp.to_dict(), "kind": kind, "ratio": float(ratio),
                                   "group_size": int(group_size)})
        ui.set_scenario(sc.replace(training=sc.training.replace(compression=c)))
        st.success(f"Scenario compression: {COMPRESSOR_LABELS[kind]}, ratio {ratio:g}, group size {group_size}.")

# ---------------------------------------------------------------- the Cholesky claim
st.header("The Cholesky claim (the CXL design)")
st.markdown(
    "The CXL design proposes sending the factor L of a result matrix D = L Lᵀ instead of D, \"halving\" the traffic. "
    "L exists only for a symmetric positive-definite D, and it has n(n+1)/2 entries: exactly the lower "
    "triangle of a symmetric D, which can be sent with no factorisation at all.")
with st.form("ch_form"):
    c1, c6 = st.columns([3, 1], vertical_alignment="bottom")
    c2, c3, c4, c5 = st.columns(4, vertical_alignment="bottom")
    name = ui.control(c1, "ch_matrix")
    damping = VIEW["ch_damping"].spec.default if lesson else ui.control(c2, "ch_damping")
    ch_workers = ui.control(c3, "ch_workers")
    ch_batch = ui.control(c4, "ch_batch")
    by_class = ui.control(c6, "ch_by_class")
    st.form_submit_button("Test the claim", type="primary", key="ch_run")

with ui.guarded("the Cholesky section"):
    ch = cholesky_study(int(seed), int(ch_batch), float(damping), int(ch_workers), bool(by_class), name)
    a = ch["applicability"]
    st.dataframe(pd.DataFrame(figs.cholesky_applicability_table(a)), hide_index=True, key="ch_app")
    ui.caption("measured", "Properties of worker 0's matrix, computed.")
    if "refusal" in ch:
        st.info(f"Not applicable: {ch['refusal']}", icon=":material/block:")  # the lab's own words, no user text
    elif "methods" in ch:
        crow, res, rr = ch["methods"], ch["sum"], ch["ring"]
        st.plotly_chart(figs.cholesky_figure(crow), key="ch_fig")
        ui.caption("measured", "Bytes counted from the packed tensors; pack + unpack time on this machine, measured "
                               "once for these settings.")
        st.dataframe(pd.DataFrame(figs.cholesky_table(crow)), hide_index=True, key="ch_table")
        st.plotly_chart(figs.factor_sum_figure(ch["true_sum"], ch["factor_sum"], ch["workers"]), key="ch_sum_fig")
        ui.caption("measured", f"{ch['workers']} workers' matrices from different digits batches. Adding the factors "
                   f"gives (Σ L)(Σ L)ᵀ, off by **{res['rel_error_of_sum_of_factors']:.1%}** (the cross terms "
                   f"Lᵢ Lⱼᵀ); even rescaled by 1/N it is off by **{res['rel_error_of_sum_of_factors_rescaled']:.2%}**"
                   " (zero only if every worker had the same matrix: try non-IID). A ring must rebuild D, add and "
                   f"factorise again at every hop: {rr['hops']} factorisations, {fmt_seconds(rr['seconds'])} here, "
                   f"relative error {rr['rel_error']:.1e}.")

# ---------------------------------------------------------------- training runs: the preset grid
st.header("Training with compression")
sharing = comp.sharing if comp.sharing != Sharing.DENSE else Sharing.SPARSE_ALLGATHER
st.markdown(f"The current scenario trained for real (gradient all-reduce, the lab's ring) with the CXL design's three "
            "optimisers × the variants chosen below, one seed each, queued in turn. Group-TopK: group size "
            f"{comp.group_size}, shared by **{SHARING_LABELS[sharing]}**. Beside it, what anyone compressing gradients "
            f"in PyTorch tries first, torch's own DDP hooks: **PowerSGD** (rank {comp.rank}, after {comp.warmup} plain "
            "steps; set both on the Training page) sends each gradient matrix as two thin ones, and the **FP16** and "
            "**BF16** all-reduces send every entry in half precision. Their arithmetic runs on the lab's ring, checked "
            "against DDP with the hooks themselves. Bytes are counted from the real messages. Emulate the edge "
            "preset's 100 Mbit/s links (Training page) to see what links cost.")

variants = ui.control(st, "cp_grid_variants", format_func=lambda v: variant_label(v, rank=comp.rank))
c2, c3 = st.columns([1, 3], vertical_alignment="bottom")
if c2.button(f"Queue {3 * len(variants)} runs", type="primary", key="cp_grid_run", icon=":material/grid_view:",
             disabled=not variants):
    with ui.guarded("queueing the grid"):
        jm, owner = ui.job_manager()  # the Training page's manager and fair queue
        items = grid_scenarios(sc, variants)
        if jobs := ui.submit_once(owner, items[0][0], "grid", store(), lambda: jm.submit_many(items, owner=owner)):
            st.session_state["cp_grid_runs"] = st.session_state["cmp_runs"] = [j.run_id for j in jobs]
c3.page_link("pages/compare.py", label="Compare them: loss, accuracy, bytes, time", icon=":material/compare_arrows:")
grid_ids = st.session_state.get("cp_grid_runs", [])
polling = bool(grid_ids) and store().list_runs(statuses=ACTIVE).id.isin(grid_ids).any()


@st.fragment(run_every=2.0 if polling else None)
def grid_view() -> None:
    with ui.guarded("the grid's results"):
        rows = grid_results(store(), grid_ids)
        if polling and not any(r["status"] in ACTIVE for r in rows):
            st.rerun()
        if done := [r for r in rows if r["status"] == "done"]:
            st.plotly_chart(figs.grid_figure(done), key="cp_grid_fig")
            if wins := where_each_wins(rows):
                st.markdown("**Where each one wins in these runs** (measured, one seed each, averaged over the "
                            "optimisers; the Compare page's repeats give the noise):")
                st.markdown("\n".join(f"- {ui.plain(w)}" for w in wins))
        if rows:
            st.dataframe(pd.DataFrame(grid_table(rows)), hide_index=True, key="cp_grid_table")
            ui.caption("emulated" if sc.training.emulate else "measured", "Measured in the runs (bytes from the "
                       "real messages; times on this shared machine, emulated link waits included). Steps: count.")


grid_view()
