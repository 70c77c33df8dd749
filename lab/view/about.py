"""The About page's model: the four designs, each claim and where the lab tests it, and what the runs on this
server measured of the placement claims (the rule by device type against the other strategies, and the
balancing loop against the coarse layer-by-layer split, each from the newest finished runs of one emulated
cluster: every student's, read only); and the glossary of the words the pages use."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Mapping

from lab.errors import LabError
from lab.scenario.names import BALANCE_LABELS, MODEL_LABELS, STRATEGY_SHORT
from lab.store.runs import run_store
from lab.view.placement import measured_plan_step, plan_key
from lab.view.pages import TITLES  # noqa: F401 - the titles the page names its links by

NEWEST = 200  # placement runs read, newest first


def _cluster(tr: Mapping, sc: Mapping) -> str:
    """What must agree for two placement runs to be compared: the cluster as emulated and the model's batch."""
    keep = {k: tr.get(k) for k in ("model", "batch_size", "micro_batches", "emulate", "slowdown", "dataset")}
    return json.dumps([sc.get("topology"), keep], sort_keys=True)


def _finished(store) -> list[dict]:
    runs = store.list_runs(statuses=("done",))
    runs = runs[runs.parallel == "placement"].head(NEWEST)
    out = []
    for rid in runs.id:
        try:
            run = store.get_run(rid)
        except LabError:  # deleted meanwhile
            continue
        step = measured_plan_step(store, run)
        if math.isfinite(step):
            out.append(dict(run, step=step, key=plan_key(run["scenario"]["training"]),
                            cluster=_cluster(run["scenario"]["training"], run["scenario"])))
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:.3g} ms"


def _where(run: Mapping) -> str:
    tr, sc = run["scenario"]["training"], run["scenario"]
    slow = ", ".join(f"{d} {f:g}× slower" for d, f in sorted((tr.get("slowdown") or {}).items()))
    return (f"{MODEL_LABELS.get(tr['model'], tr['model'])} on “{sc['topology'].get('name', '')}”, "
            + ("emulated" + (f" ({slow})" if slow else "") if tr.get("emulate") else "every device this machine"))


def placement_evidence(store) -> dict[str, str]:
    """The measured sentence for each placement claim: ``type_rule`` and ``balancing``; a claim nobody has
    measured on this server yet says how to measure it."""
    runs = _finished(store)
    out = {"type_rule": "Not measured on this server yet: on the Placement page, “Run every strategy”.",
           "balancing": "Not measured on this server yet: on the Placement page, “Run the balancing loop”."}
    typed = next((r for r in runs if r["key"] == "type_rule"), None)
    if typed is not None:
        same = [r for r in runs if r["cluster"] == typed["cluster"] and r["scenario"]["training"].get(
            "balance", "off") == "off"]
        best: dict[str, float] = {}
        for r in same:  # runs are newest first: keep each strategy's newest
            best.setdefault(r["key"], r["step"])
        others = sorted((v, k) for k, v in best.items() if k != "type_rule")
        rank = 1 + sum(1 for v, _ in others if v < best["type_rule"])
        out["type_rule"] = (f"Measured ({_where(typed)}): the type rule's step {_ms(best['type_rule'])}, "
                            + (f"{rank} of {len(best)} strategies; " + ", ".join(
                                f"{STRATEGY_SHORT.get(k, k)} {_ms(v)}" for v, k in others)
                               if others else "no other strategy measured on this cluster yet") + ".")
    loop = next((r for r in runs if r["scenario"]["training"].get("balance", "off") != "off"), None)
    if loop is not None:
        bal = loop["info"]["balance"]
        split = next((r for r in runs if r["key"] == "even_split" and r["cluster"] == loop["cluster"]), None)
        head = (f"Measured ({_where(loop)}): the loop ({BALANCE_LABELS[loop['key']]}) "
                + (f"settled after {len(bal['rounds'])} rounds" if bal.get("converged")
                   else f"had not settled after {len(bal['rounds'])} rounds")
                + f", its last round's step {_ms(loop['step'])}")
        out["balancing"] = head + (f" against {_ms(split['step'])} for the even layer split "
                                   f"({loop['step'] / split['step'] - 1:+.0%})." if split is not None
                                   else "; the even layer split has not been measured on this cluster.")
    return out


INTRO = ("The lab turns four published designs for heterogeneous distributed training into things you can see, "
         "change and run. Each design makes claims. The lab never repeats a claim as fact: it shows it beside what "
         "the lab's cost model says ({modelled}) and what this machine does ({measured}).")

#: (design, what it proposes, [(claim, the page that tests it, how, and the key of its measured sentence if any)]).
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


GLOSSARY_HEAD = "Words used in the lab"
GLOSSARY_INTRO = ("Every term the pages use without stopping to explain it, in a sentence or two. A page explains a "
                  "term where it first appears (a caption, or the tooltip of a control); this list has them all.")

#: (term, what it means), alphabetical; the page shows each as text.
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("AdaBelief", "An Adam variant that divides each step by how far the gradient strays from its running average "
                  "(the optimiser's \"belief\"), not by the gradient's size: large steps where the gradient is "
                  "predictable, small ones where it is noisy."),
    ("algbw and busbw", "Bandwidths as the nccl-tests benchmarks define them for an all-reduce: algbw is the buffer "
                        "per device S over the time t; busbw is algbw × 2(N − 1)/N, what each link of a ring carries, "
                        "so it can be compared across device counts and with a link's own speed."),
    ("all-reduce", "A collective operation: every device starts with its own buffer (a gradient) and ends with the "
                   "sum over all devices, so every device takes the same optimiser step."),
    ("alpha-beta model", "The cost of one message: a fixed latency α plus its bytes over the bandwidth; every modelled "
                         "transfer in the lab is priced so, on the narrowest link of its route."),
    ("ASIC", "Application-specific integrated circuit: a chip built for one kind of work, fast at it and at nothing "
             "else."),
    ("calibration", "Timing small operators and messages on this machine and fitting the cost model's numbers to them "
                    "(the machine profile), so that the model's predictions describe this machine and not a "
                    "datasheet."),
    ("CXL", "Compute Express Link: a coherent interconnect over PCIe's wires through which a device reads another "
            "device's memory directly, without a copy through the host CPU."),
    ("data parallel", "Every worker holds the whole model and trains on its own share of each batch; the gradients "
                      "are summed by an all-reduce before every step, so all copies stay the same."),
    ("DPU", "Data processing unit: a network card with processors of its own, which moves and transforms data beside "
            "the network."),
    ("emulated, measured, modelled", "Measured: timed on this machine. Modelled: computed by the lab's cost model "
                                     "from the topology's numbers, nothing run. Emulated: run for real with a device "
                                     "or a link made slower by waiting, standing in for hardware this machine lacks."),
    ("error feedback (EF)", "What a compressor leaves out of a gradient is kept on the worker and added to its next "
                            "gradient, so nothing is lost for good, only late; it lets heavy compression still "
                            "converge."),
    ("FPGA", "Field-programmable gate array: a chip whose circuits are configured for one task after it is made; in "
             "the CXL design it runs the convolutions."),
    ("gloo", "PyTorch's library of collective operations (all-reduce, send, receive) for CPUs over TCP: the lab's real "
             "runs use it between processes on this machine."),
    ("GPipe", "A pipeline schedule (from Google's GPipe): every micro-batch goes forward through the stages, then "
              "every one goes backward, and the step ends with one weight update."),
    ("greedy earliest finish", "A placement rule: take the operators in order and put each on the device where it "
                               "would finish earliest, counting the work already queued there and the time to bring "
                               "its inputs over the links."),
    ("Group-TopK and Top-K", "Gradient compressors that send only the k largest values (by size) with their "
                             "positions: Top-K over the whole gradient, Group-TopK within every group of consecutive "
                             "values, which is cheaper to find and spreads what is sent over the whole gradient."),
    ("HEFT", "Heterogeneous Earliest Finish Time, a classic list scheduler: it ranks the operators by the longest "
             "path from each to the end and places the most urgent first, each on the device where it finishes "
             "earliest."),
    ("held-out set and held-out error", "Samples (or runs) kept out of fitting: a model's test accuracy, or a "
                                        "prediction's error, on them says how well it does on what it has not seen."),
    ("Kendall's tau", "A rank correlation between two orderings, from −1 (reversed) through 0 (unrelated) to +1 (the "
                      "same order): here the cost model's order of the plans against their measured order."),
    ("makespan", "The time from the start of a step's first operator to the end of its last: how long one training "
                 "step's schedule takes."),
    ("Max-AdaBelief", "AdaBelief whose denominator never shrinks (it keeps its running maximum, as AMSGrad does for "
                      "Adam): the CXL design's answer to Adam's failure to converge; run distributed by all-reducing "
                      "the optimiser's state."),
    ("micro-batch", "A part of a batch: a pipeline cuts each batch into micro-batches so that the next device starts "
                    "on the first part while the one before it works on the second."),
    ("model parallel", "The model's operators (layers) are split across devices, each running its own part and "
                       "passing activations on, instead of every device holding the whole model."),
    ("NPU", "Neural processing unit: an accelerator built for neural networks' arithmetic."),
    ("PCIe", "The standard bus between a host CPU and its cards; without CXL, data from one device to another passes "
             "through the host."),
    ("pipeline bubble", "The time a pipeline's stages sit idle at the start and the end of a step, waiting for the "
                        "first micro-batch to reach them or the last to leave; more micro-batches make it a smaller "
                        "share of the step."),
    ("placement", "Which device runs which operator of the model; a placement strategy decides it from the cost "
                  "model's time for every operator on every device and every transfer between them."),
    ("PowerSGD", "A compressor (one of torch's DDP hooks) that sends a low-rank approximation of each gradient matrix; "
                 "it sends the full gradient for its first (warm-up) steps."),
    ("ring all-reduce", "An all-reduce on devices in a ring, the buffer cut into N chunks: in N − 1 reduce-scatter "
                        "steps each device adds the chunk it receives into its own and passes it on; in N − 1 "
                        "all-gather steps the finished chunks go round. Each device sends 2(N − 1)/N of the buffer."),
    ("warm-up", "The first steps of a run or a round, left out of its timings: they pay one-off costs (allocating "
                "memory, first use of code and caches) that later steps do not."),
)


@dataclass(frozen=True)
class Claim:
    claim: str
    page: str  # the page file that tests it
    how: str
    measured: str | None  # what this server's runs measured of it, when they can say


@dataclass(frozen=True)
class Design:
    title: str
    summary: str
    claims: tuple[Claim, ...]


def page(store=None) -> list[Design]:
    """The About page's sections: every design with its claims, each with its measured sentence where the runs of
    ``store`` (default: the server's run store) can give one."""
    evidence = placement_evidence(store if store is not None else run_store())
    return [Design(title, summary, tuple(Claim(claim, where, how, evidence.get(key[0]) if key else None)
                                         for claim, where, how, *key in claims))
            for title, summary, claims in DESIGNS]


__all__ = ["TITLES", "placement_evidence", "page", "Design", "Claim", "DESIGNS", "INTRO", "GLOSSARY", "GLOSSARY_HEAD",
           "GLOSSARY_INTRO"]
