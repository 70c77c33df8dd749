"""Home: what the lab is, and a link to each page."""

import streamlit as st

import ui
from app import available_pages

ui.scenario_sidebar()
st.title("Heterogeneous distributed training lab")
st.markdown(
    "Draw a cluster of host CPUs, GPUs, FPGAs, ASICs, DPUs and NPUs, see which layer the cost model "
    "puts on which device and why, step through what an all-reduce really sends, and run small real "
    "multi-process trainings (torch.distributed over gloo on this machine's CPU) to compare Adam, "
    "AdaBelief and Max-AdaBelief with and without gradient compression.\n\n"
    "Every figure says what it is: "
    f"{ui.badge('measured')} on this machine, {ui.badge('modelled')} by the lab's cost model from the "
    f"topology's numbers, or {ui.badge('emulated')} (a device or link made slower by waiting). "
    "The device and link numbers are illustrative assumptions taken from public datasheets; edit them.")
st.subheader("Pages")
DESCRIPTIONS = {
    "Topology": "build the cluster: devices, links, routes, the CXL-versus-PCIe question",
    "Placement": "which operator runs on which device, the schedule, and dynamic load balancing",
    "All-reduce": "ring, tree, host and hierarchical all-reduce step by step, modelled and measured",
    "Optimisers": "Adam, AdaBelief and Max-AdaBelief on 2-D functions and Adam's counterexample",
    "Training": "real multi-process runs, live",
    "Compare": "stored runs side by side",
    "Compression": "Group-TopK, error feedback, sparse rings, and the Cholesky claim",
    "Jobs": "job lifecycle, faults and recovery",
    "Fidelity": "prediction beside measurement for every run",
}
for file, title, icon in available_pages():
    if title == "Home":
        continue
    st.page_link(file, label=f"**{title}**: {DESCRIPTIONS.get(title, '')}", icon=icon)
