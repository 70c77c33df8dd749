"""About the designs: the four published designs the lab is built from, their claims, and where each is tested."""

import streamlit as st

import ui
from app import PAGES
from lab.store.runs import store
from lab.view.about import placement_evidence

ui.scenario_sidebar()
st.title("About the designs")
st.markdown(
    "The lab turns four published designs for heterogeneous distributed training into things you can see, "
    "change and run. Each design makes claims. The lab never repeats a claim as fact: it shows it beside what "
    f"the lab's cost model says ({ui.badge('modelled')}) and what this machine does ({ui.badge('measured')}).")

DESIGNS = [
    ("Heterogeneous training over a coherent interconnect (the CXL design)",
     "A host CPU and several kinds of device (GPU, FPGA, ASIC, DPU) joined by CXL, so one device reads another's "
     "memory without a copy through the host. Layers go to devices by type: fully-connected layers to GPUs, "
     "convolutions to FPGAs, activations to ASICs or DPUs. Data parallelism with a ring all-reduce (its worked "
     "example: four devices, four chunks each), started by the host once every device is done (synchronous) or by "
     "each device when it is done (asynchronous). It adds Max-AdaBelief, an AdaBelief whose denominator never "
     "shrinks, run in a distributed way by all-reducing the optimiser's state, and \"Cholesky compression\".",
     [("CXL removes the host hop, so device-to-device transfers are faster than over PCIe.",
       "pages/topology.py", "the CXL-versus-PCIe section, on your own cluster (modelled from datasheet numbers)"),
      ("A ring all-reduce leaves every device with the sum, sending 2(N − 1)/N of the buffer.",
       "pages/allreduce.py", "step by step, modelled on your links, and measured between real processes"),
      ("Placement by device type is a good placement.", "pages/placement.py",
       "the type rule beside greedy earliest finish, HEFT and the exact optimum, modelled and run", "type_rule"),
      ("Max-AdaBelief always converges.", "pages/optimisers.py",
       "Adam's counterexample and 2-D test functions; then real runs on the Training and Compare pages"),
      ("Sending the Cholesky factor halves the traffic.", "pages/compression.py",
       "the Cholesky section: which matrices have a factor, and what the lower triangle alone costs")]),
    ("Dynamic load balancing for model parallelism",
     "A cost model prices every operator on every device and every transfer between them. A greedy rule places "
     "operators one by one on the device where each would finish earliest, counting the work already queued "
     "there and the time to bring its inputs. Every device then gets a weight; after each training round the "
     "weights move toward the devices that waited, and the plan is made again until it stops changing.",
     [("The greedy earliest-finish rule makes a good plan.", "pages/placement.py",
       "its makespan beside the exact optimum, and why each operator went where it went"),
      ("Re-weighting by waiting time converges to a balanced plan, and greedy placement with balancing beats the "
       "coarse layer-by-layer split.", "pages/placement.py",
       "the balancing loop simulated beside the plan made with the true speeds, then run for real against the even "
       "layer split on the same emulated cluster", "balancing")]),
    ("A heterogeneous parallel computing system (task level)",
     "Jobs are parsed into sub-tasks, devices grouped by hardware type into resource groups, jobs scheduled onto "
     "groups uniformly or by free resources, data split evenly or by each node's share of the compute, and "
     "nodes monitored, with alarms and repair when one fails. After each iteration a node passes a share of its "
     "data to a neighbour.",
     [("A job survives a failed worker by repair or migration.", "pages/jobs.py",
       "real jobs with an injected fault, heartbeats, checkpoints and recovery"),
      ("The two scheduling policies place jobs well.", "pages/jobs.py", "the scheduling what-if on your topology's groups"),
      ("Passing data to a neighbour helps training.", "pages/training.py",
       "the exchange share of real runs (advanced controls)")]),
    ("Communication compression for training on edge devices (the edge-compression design)",
     "On weak edge links communication can be most of the training time. Group-TopK keeps the largest k values "
     "of every group of the gradient; the sparse gradients are shared by a ring reduce-scatter and all-gather; "
     "the learning rate grows with the number of nodes (the linear scaling rule).",
     [("Communication is over 80 % of training time on edge links.", "pages/training.py",
       "emulated edge links in real runs, with the time split measured"),
      ("Group-TopK keeps accuracy while sending a few per cent of the gradient.", "pages/compression.py",
       "compressors on one gradient, the sparse ring's fill-in, and the grid of real runs"),
      ("Summing sparse blocks round the ring keeps them sparse.", "pages/compression.py",
       "the fill-in, measured block by block")]),
]

TITLES = {f: t for f, t, _ in PAGES}
evidence = {}
with ui.guarded("reading the runs"):
    evidence = placement_evidence(store())
for title, summary, claims in DESIGNS:
    with st.container(border=True):
        st.subheader(title)
        st.markdown(summary)
        for claim, page, how, *measured in claims:
            st.markdown(f"**Claim:** “{claim}”  \n*Where the lab tests it:* {how}.")
            if measured and measured[0] in evidence:
                st.markdown(f"{ui.badge('measured')} {ui.plain(evidence[measured[0]])}")
            st.page_link(page, label=f"Open {TITLES[page]}", icon=":material/science:")
