"""What the Placement page shows of a plan and its runs that is not a figure: pins changed by its buttons, a kept
baseline, the plan by another cost model, the runs of a plan or of every strategy, and the sentences built from
them. User text goes through ``plain`` (the page passes its markdown escape; identity by default)."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping, Sequence

from lab.errors import LabError
from lab.jobs.comparison import Spread
from lab.machine import plans
from lab.machine.calibrated_model import cost_model as named_cost_model
from lab.modelled import placement as pl
from lab.modelled.placement import order
from lab.scenario.document import Setting, check_pins
from lab.scenario.names import (ANY_MODEL, COST_MODELS, PIPELINE_SCHEDULE_SHORT, STRATEGY_LABELS, STRATEGY_NAMES,
                                STRATEGY_SHORT)
from lab.scenario.text import check_name, loads
from lab.scenario.topology import Topology
from lab.scenario.units import bytes_unit
from lab.store.runs import ACTIVE

Plain = Callable[[str], str]


def changed_pins(pins: Mapping[str, str], change: str, op: str, device: str) -> dict[str, str]:
    """The pins after a button: "pin" puts ``op`` on ``device``, "unpin" frees ``op``, anything else clears all."""
    new = dict(pins)
    if change == "pin":
        new[op] = device
    elif change == "unpin":
        new.pop(op, None)
    else:
        new = {}
    return new


def with_pins(sc, change: str, chosen: Mapping[str, Any]):
    """The scenario ``sc`` after a pin button (:func:`changed_pins`), ``chosen`` holding the pin controls' values
    (the operator ``pl_pin_op`` and the device ``pl_pin_dev``)."""
    pins = changed_pins(sc.training.pins, change, chosen["pl_pin_op"], chosen["pl_pin_dev"])
    return sc.replace(training=sc.training.replace(pins=pins))


def baseline_json(record: Mapping) -> str:
    """A kept plan's record (:func:`lab.modelled.placement.plan_record`) as the text the link carries."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True)


def baseline_from_json(text: str) -> dict | None:
    """The kept plan of a link (None for none); a record that is not one raises a LabError saying what is wrong.
    It is outside input: every field is checked, its topology as a topology file is."""
    if not text:
        return None
    where = "the kept baseline"
    d = loads(text)
    if not isinstance(d, dict) or set(d) != {"model", "batch", "strategy", "pins", "cost_model", "topology",
                                             "makespan", "busy"}:
        raise LabError("is not a kept plan (its fields differ)", where=where)
    if d["model"] not in ANY_MODEL or d["strategy"] not in STRATEGY_NAMES or d["cost_model"] not in COST_MODELS:
        raise LabError("names a model, strategy or cost model the lab does not have", where=where)
    if isinstance(d["batch"], bool) or not isinstance(d["batch"], int) or not 1 <= d["batch"] <= 65536:
        raise LabError("has a batch size that is not a whole number from 1 to 65536", where=where)
    d["pins"] = dict(check_pins(d["pins"], where=f"{where} pins"))
    if d["topology"] is not None:
        d["topology"] = Topology.from_dict(d["topology"]).to_dict()
    finite = Setting(float, 0.0, min=0.0, max=1e12)
    d["makespan"] = finite.check("makespan", d["makespan"], where)
    if not isinstance(d["busy"], dict) or len(d["busy"]) > 256:
        raise LabError("has no busy time per device", where=where)
    d["busy"] = {check_name(k, where, what="a device name"): finite.check("busy", v, where) for k, v in d["busy"].items()}
    return d


PINS_LINE = "**Pinned:** {pins}. Pins are part of the scenario (saved with it and carried by the page link)."
NO_PINS = "nothing: the strategy places every operator"


def pins_line(pins: Mapping[str, str], plain: Plain = str) -> str:
    """The pins in the scenario, in one sentence."""
    return PINS_LINE.format(pins=", ".join(f"{plain(t)} → {plain(d)}" for t, d in pins.items()) or NO_PINS)


def strategy_ranking(store, run_ids, profile) -> tuple[list[dict], float]:
    """Placement runs grouped by strategy: per strategy the modelled step, the measured step (mean over its
    repeats of each run's median, with the comparison's 95 % interval), the error, and Kendall's tau between
    the model's and the measurement's order of the strategies (NaN with fewer than two)."""
    by: dict[str, list[dict]] = {}
    for rid in run_ids:
        try:
            out = plans.plan_outcome(store, rid, profile)
        except LabError:  # a run deleted meanwhile, or not a placement run
            continue
        if out["status"] == "done" and math.isfinite(out["measured_step"]):
            by.setdefault(plans.plan_label(out), []).append(out)
    rows = []
    for label, outs in by.items():
        name = outs[0]["strategy"]
        spread = Spread.of([o["measured_step"] for o in outs])
        lo, hi = spread.interval() if spread.n > 1 else (None, None)
        modelled = outs[0]["modelled_step"]
        rows.append({"strategy": label, "key": name, "modelled": modelled,
                     "measured": spread.mean, "low": lo, "high": hi, "repeats": spread.n,
                     "error": spread.mean / modelled - 1.0 if modelled and math.isfinite(modelled) else math.nan})
    return rows, plans.kendall(rows)


def run_intro() -> str:
    """What "Run this plan" does, and which comparison is the honest one."""
    return ("**Run this plan** starts one process per device the plan uses, over gloo: each holds the operators "
            "placed on its device, activations travel forward and gradients backward between them, and the batch "
            "is pipelined in micro-batches (GPipe: each batch cut into parts that go forward through the pieces, then backward), so the bubbles (the time a device waits for the first part to arrive or the last to leave) are real. With **emulate the drawn cluster** on, "
            "an operator on a device the catalogue says is slower for its class waits in proportion to its warm "
            "time on this machine (measured before the first step, so a core that idled is not multiplied), and every "
            "tensor waits the topology's link time (both emulated). With it off, every device is this machine: then "
            "nothing emulated enters the measurement, and the prediction from this machine's calibrated costs is "
            "tested on its own; that is the comparison that is not circular. **Run every strategy** runs each "
            "strategy's plan (with the pins) and ranks them by the model and by the measurement.")


def plan_scenario(sc, model: str, batch: int, strategy: str, assignment: Mapping[str, str], micro_batches: int,
                  steps: int, emulate: bool):
    """The scenario of a placement run of the page's plan: its model, batch, strategy, pins and every operator's
    device as the page placed it (with the page's cost model)."""
    tr = sc.training.replace(parallel="placement", model=model, batch_size=int(batch), strategy=strategy,
                             placement=dict(assignment), micro_batches=int(micro_batches), steps=int(steps),
                             emulate=bool(emulate), compression={"kind": "none"}, sync="allreduce",
                             fault="none", fault_policy="fail", eval_every=max(1, int(steps)))
    return sc.replace(training=tr)


def assignment_of(g, strategy: str) -> dict[str, str]:
    """Every operator's device in ``strategy``'s plan of task graph ``g``."""
    return pl.plan_assignment(g, strategy)[0]


def schedule_runs(g, assignment: Mapping[str, str], schedule: str, micro_batches: int) -> bool:
    """Whether ``schedule`` runs the plan ``assignment`` of ``g``: its pieces are the runs of one device in the
    operators' topological order, and every device's list of actions must be one the schedule makes (1F1B: one
    stretch of the model per device; interleaved 1F1B: stretches that go round the devices in turn; zero bubble:
    either)."""
    seq = [assignment[t] for t in g.topological_order()]
    piece_devices = [d for i, d in enumerate(seq) if i == 0 or d != seq[i - 1]]
    try:
        for d in dict.fromkeys(piece_devices):
            order.schedule(schedule, [k for k, x in enumerate(piece_devices) if x == d], len(piece_devices),
                           micro_batches)
    except LabError:
        return False
    return True


def strategy_scenarios(sc, g, model: str, batch: int, micro_batches: int, steps: int, emulate: bool,
                       repeats: int, plan=assignment_of) -> list[tuple]:
    """(scenario, run name) for every strategy's plan of ``g`` (``plan(g, strategy)`` gives the assignment),
    ``repeats`` times each with seeds 0, 1, ..., in the schedule of ``sc``; a strategy that cannot place the graph,
    or whose plan the schedule cannot run (:func:`schedule_runs`), is left out."""
    out = []
    for name in STRATEGY_NAMES:
        try:
            assignment = plan(g, name)
        except LabError:
            continue
        if not schedule_runs(g, assignment, sc.training.schedule, micro_batches):
            continue
        for r in range(int(repeats)):
            one = plan_scenario(sc, model, batch, name, assignment, micro_batches, steps, emulate)
            one = one.replace(training=one.training.replace(seed=sc.training.seed + r))
            out.append((one, f"{STRATEGY_SHORT[name]} · {model} · seed {one.training.seed}"))
    return out


MAX_SHOWN_RUNS = 40


def shown_runs(old, new) -> tuple:
    """The placement runs the page shows after queueing ``new``: the earlier ones kept (a plan run and then its
    pinned variant stand side by side), newest last, at most :data:`MAX_SHOWN_RUNS`."""
    out = list(dict.fromkeys([*(old or ()), *new]))
    return tuple(out[-MAX_SHOWN_RUNS:])


def run_exists(store, run_id: str) -> bool:
    try:
        store.get_run(run_id)
        return True
    except LabError:
        return False


def milliseconds(seconds: float) -> str:
    return "—" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3g} ms"


def outcome_metrics(out: Mapping) -> list[tuple[str, str]]:
    """(label, value) of a placement run's headline: measured and modelled step, the error, the status."""
    err, rerr = out["error"], out.get("replay_error", math.nan)
    return [("Step, measured (median)", milliseconds(out["measured_step"])),
            ("Step, modelled", milliseconds(out["modelled_step"])),
            ("Error (measured / modelled − 1)", "—" if not math.isfinite(err) else f"{err:+.0%}"),
            ("Replay error (drawn step)", "—" if not math.isfinite(rerr) else f"{rerr:+.0%}"),
            ("Bubble, measured / modelled", f"{share(out.get('bubble_measured'))} / {share(out.get('bubble_modelled'))}"),
            ("Peak activations, measured / modelled", peak_pair(out.get("memory") or [])),
            ("Run", f"{out['status']}, {out['steps_measured']} steps measured (the first 2 are warm-up)"
                    + (f": {out['failure']}" if out.get("failure") else ""))]


def share(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.0%}"


def peak_pair(memory: Sequence[Mapping[str, Any]]) -> str:
    """The largest device peak measured and modelled, in one unit."""
    mea = [r["measured"] for r in memory if r.get("measured") is not None]
    mod = [r["modelled"] for r in memory if r.get("modelled") is not None]
    if not mea and not mod:
        return "—"
    scale, unit = bytes_unit(max(mea + mod))
    return " / ".join(f"{max(v) * scale:.3g} {unit}" if v else "—" for v in (mea, mod))


def memory_table(out: Mapping) -> list[dict[str, Any]]:
    """Per device: the bytes it held for the backward at its peak, measured and modelled under the run's schedule,
    and modelled under every other schedule the plan can run (— where it cannot: 1F1B needs one piece per
    device)."""
    rows = out.get("memory") or []
    every = [v for r in rows for v in (r["measured"], r["modelled"]) if v] + [
        v for peaks in (out.get("memory_by_schedule") or {}).values() if peaks for v in peaks.values() if v]
    scale, unit = bytes_unit(max(every) if every else 1.0)

    def size(v: float | None) -> str:
        return "—" if v is None else f"{v * scale:.4g}"

    table = []
    for r in rows:
        row = {"device": r["device"], f"measured ({unit})": size(r["measured"]),
               f"modelled ({unit})": size(r["modelled"]),
               "measured / modelled − 1": "—" if r["error"] is None else f"{r['error']:+.1%}"}
        for name, peaks in (out.get("memory_by_schedule") or {}).items():
            if name != out.get("schedule"):
                row[f"modelled under {PIPELINE_SCHEDULE_SHORT[name]} ({unit})"] = size((peaks or {}).get(r["device"]))
        table.append(row)
    return table


def memory_caption(out: Mapping) -> str:
    label = PIPELINE_SCHEDULE_SHORT.get(out.get("schedule"), out.get("schedule"))
    return (f"Activation memory under {label}: the bytes each process held at once for a later backward (the "
            "tensors autograd saves, each storage once, parameters and buffers left out). Measured: counted by "
            "autograd's saved-tensor hook in the run's drawn steps. Modelled: each operator's saved bytes from one "
            "forward of the traced model at two small batches, drawn out to the micro-batch, added up along the "
            "process's list of actions (a forward adds its micro-batch, its backward frees it). GPipe holds every "
            "micro-batch before the first backward; 1F1B holds at most S − k on stage k of S (counting from 0). Memory "
            "outside these (parameters, optimiser state, gradients, messages in flight) is the same under every "
            "schedule and not counted.")


def measured_badge(out: Mapping) -> str:
    return "measured, with emulated waits" if out["emulated"] else "measured, every device is this machine"


def gantt_title(out: Mapping) -> str:
    return (f"One training step of the plan ({STRATEGY_LABELS.get(out['strategy'], out['strategy'])}), "
            f"{out['micro_batches']} micro-batches, step {out['drawn_step']}")


def gantt_caption(out: Mapping) -> str:
    unc = out.get("clock_uncertainty") or 0.0
    return ("Top: what the processes recorded in the step nearest the median step time (grey hatched: emulated "
            "waits; lines: tensors from the sender's stamp to the moment the receiver took them). Middle, "
            "modelled: the prediction, each process's own tasks in the executor's order from this machine's "
            "calibrated costs, on this machine's cores (processes that share a core take turns; a message costs "
            "CPU on both sides). Bottom, replayed: the recorded step run again through the same model with its own "
            "measured task times and deliveries, each process on a core of its own and nothing between the tasks; "
            "close to the top, the schedule explains the step; far below it, the time went between the tasks "
            "(processes waiting for a core, the executor's own work). " + str(out.get("caveat") or "") + ". The "
            "plan's makespan above is another quantity: one forward pass of the whole batch by the page's cost "
            "model. One clock: every process stamps the machine's monotonic clock (offsets from rank 0 estimated "
            f"at the start, uncertainty {unc * 1e6:.0f} µs).")


def waiting_line(out: Mapping) -> str:
    if out["status"] in ("queued", "running"):
        return f"The run is {out['status']}; its recorded steps appear here when it ends."
    why = out.get("failure") or ""
    return f"The run is {out['status']} and recorded no step" + (f": {why}" if why else ".")


def ranking_line(tau: float, n: int) -> str:
    if not math.isfinite(tau):
        return "The ranking needs at least two plans that finished."
    return (f"Kendall's tau (+1: the same order, 0: unrelated, −1: reversed) between the model's order and the measured order of these {n} plans: {tau:+.2f} "
            "(1: the same order, −1: reversed). Bars: modelled and measured step; whiskers: the 95 % interval over "
            "the repeats.")


def kept_runs(store: Any, run_ids: Any) -> tuple[list[str], bool]:
    """The runs a link names that still exist, and whether any of them is queued or running (the page polls)."""
    ids = [r for r in run_ids or () if run_exists(store, r)]
    return ids, bool(ids) and bool(len(store.list_runs(statuses=ACTIVE).query("id in @ids")))


def placed(strategy: str, g) -> tuple:
    """The plan of ``strategy`` on task graph ``g`` as the page shows it: (the graph it placed, which drops
    pins the strategy cannot honour, with a note saying so; the validated schedule; its transfers; the reason
    for every operator's device)."""
    shown, note = pl.graph_for(strategy, g)
    s = pl.run_strategy(strategy, shown).validate(shown)
    return shown, note, s, pl.transfer_rows(shown, s), pl.reasons(shown, s)


def other_plan_line(strategy: str, og, topology, pins: Mapping[str, str], assignment: Mapping[str, str],
                    cm_name: str, profile) -> str | None:
    """Where the other cost model's plan of the same strategy differs from the one shown: the datasheet's is
    what the catalogue alone says, the calibrated one what runs on this machine (None: the same plan, or no
    profile to compare with)."""
    if profile is None:
        return None
    other = "datasheet" if cm_name == "calibrated" else "calibrated"
    try:
        g = pl.TaskGraph.from_model(og, topology, model=named_cost_model(other, profile)).with_pins(dict(pins))
        _, _, s, _, _ = placed(strategy, g)
    except LabError:
        return None
    moved = [op for op in og.names if s.assignment.get(op) != assignment.get(op)]
    if not moved:
        return (f"The {'catalogue alone (datasheet)' if other == 'datasheet' else 'calibrated model of this machine'}"
                " makes the same plan.")
    shown = ", ".join(f"{op} → {s.assignment[op]}" for op in moved[:6]) + (" …" if len(moved) > 6 else "")
    if other == "datasheet":
        return (f"The catalogue alone (datasheet, one forward pass, catalogue links) would put {len(moved)} of "
                f"{len(og.names)} operators elsewhere: {shown}.")
    return (f"On this machine (the calibrated model: the executor's messages and per-operator costs) the plan "
            f"would put {len(moved)} of {len(og.names)} operators elsewhere: {shown}. Choose the calibrated cost "
            "model to plan on what runs here.")


# ----- what the Placement page says ----------------------------------------------------------------
INTRO = ("Each model (a preset, a classic architecture of torchvision, or your own network from an ONNX file) is "
         "traced (torch.fx) into operators with FLOPs and bytes. A cost model turns them into "
         "seconds on every device of the scenario's topology and transfers into seconds over the route (**latency "
         "+ bytes / bottleneck**). Each strategy then places every operator (greedy earliest finish puts each operator "
         "in turn on the device where it would finish earliest; HEFT does the same, placing first the operators with "
         "the longest path to the end of the step); a **pin** puts one operator on a device "
         "of your choice and the strategy places the rest around it. The plans are modelled: from the catalogue's "
         "throughputs, or from this machine's calibrated costs (the numbers the Training page predicts with). Under "
         "**Run the plan**, a plan runs in real processes and is measured beside the model.")


WHY_CAPTION = ("the finish on each device as the earliest-finish rule weighs it when the plan places this operator "
               "(greedy earliest finish: in topological order; other strategies: in start order), with the operators "
               "placed before it already queued: inputs exist + transfer + wait for the device + compute = finish.")


def cost_model_line(cm) -> str:
    """What the chosen cost model's numbers are (the calibrated model says how it prices transfers itself)."""
    if getattr(cm, "name", "") == "calibrated":
        return f"Cost model: {cm.describe()}."
    return f"Cost model: {cm.describe()}. Transfers: latency + bytes / bottleneck bandwidth of the route."


def why_caption(cm) -> str:
    """:data:`WHY_CAPTION` and where the numbers of the chosen cost model ``cm`` come from, in the Gantt chart's
    units (one pass of the batch as that model prices it)."""
    if getattr(cm, "name", "") != "calibrated":
        return (WHY_CAPTION + " Units: seconds of one forward pass by the catalogue's numbers (datasheet): compute "
                "from the catalogue's throughputs, transfers over the catalogue's links. Neither is measured here; "
                "a run of the plan on this machine is.")
    measured = getattr(cm, "executor", None) is not None
    return (WHY_CAPTION + " Units: seconds of one forward + backward pass on this machine: compute calibrated "
            "(this machine's operator costs, " + ("as the placement executor runs them" if measured else
                                                  "from whole-network calls") + "), times the catalogue's slowdown of "
            "the device (emulated, as a run waits); transfers " + ("calibrated: the executor's messages on this "
                                                                   "machine, or the topology's link where slower"
                                                                   if measured else "by the topology's links "
                                                                   "(datasheet): this profile has no measurement of "
                                                                   "the executor's messages") + ".")


BASELINE_CAPTION = ("busy time per device (compute only), then the makespan (from the step's first operator starting to its last ending), in the baseline and now. The baseline "
                    "travels in the page link.")


NO_BASELINE = ("Keep a plan, then pin an operator, change the strategy or edit a link on the Topology page to see what "
               "it costs.")


DAG_CAPTION = ("operators in layers by depth, one column per layer, read left to right and on down the bands like "
               "lines of text; an edge that wraps runs under its band. Red dashed edges are activations sent between "
               "devices. A long name is cut to its end (…); the hover gives it whole, with its device and cost.")


MEMORY_CAPTION = "memory = parameters + output activations (float32) of the operators placed there."


COMPARISON_COLUMNS = {"above optimum (%)": {"kind": "number", "format": "%.1f"}}


#: A character of a table's text, in pixels, with some room to spare (Streamlit's tables are 14-pixel Source Sans).
TABLE_CHAR_PX = 7
#: What a window 1024 pixels wide leaves a table beside the sidebar (a classroom projector).
TABLE_PX = 650


def text_px(chars: int) -> int:
    """The width of a table column whose longest text has ``chars`` characters, with its cell's padding."""
    return 16 + TABLE_CHAR_PX * chars


def assignment_columns(table: Sequence[Mapping[str, Any]]) -> dict:
    """The assignment table's "why here" as wide as its longest reason, up to what a 1024-pixel window leaves
    beside the operator (at most 180 pixels of it) and its device, so the reason reads whole on a projector; a
    longer reason or name shows whole when its cell is clicked."""
    def longest(col: str) -> int:
        return max([len(col)] + [len(str(r.get(col, ""))) for r in table])

    operator = min(180, text_px(longest("operator")))  # a torchvision name of 40 characters would take it all
    room = TABLE_PX - operator - text_px(longest("device"))
    return {"operator": {"kind": "text", "width": operator},
            "why here": {"kind": "text", "width": max(200, min(room, text_px(longest("why here")))),
                         "help": "why the plan puts the operator on this device (click a cell to read it whole)"}}


def assignment_caption(unit: str) -> str:
    return (f"times in {unit}; an empty 'on device' cell means that device has no kernel for the operator's class (or "
            "a pin excludes it). Data-layout ops (view, flatten, transpose) are merged into the operator that "
            "produced their input.")


def comparison_caption(pass_: str) -> str:
    return (f"one {pass_} of one batch, with the pins; chain_dp optimises the steady pipeline bottleneck (its note), "
            "not this single-pass makespan.")


def explained(names: Sequence[str], current: str | None) -> tuple[str, str | None]:
    """The operator the "why" panel explains: the current one while the graph has it, else the first, with a
    notice naming the one that went."""
    if current in names:
        return current, None
    notice = f"The operator explained is now {names[0]} ({current} is not in this graph)." if current else None
    return names[0], notice


def against_baseline(text: str, record: Mapping) -> tuple[str, list | None, str | None]:
    """The plan ``record`` beside the baseline the link keeps as ``text``: (summary, per-device rows, or None
    without a baseline; a notice when the link's baseline could not be read and is dropped)."""
    try:
        base = baseline_from_json(text)
    except LabError as exc:
        return "", None, f"The baseline in the link was dropped: {exc}"
    if base is None:
        return "", None, None
    summary, rows = pl.compare_plans(base, record)
    return summary, rows, None


def baseline_columns(columns: Sequence[str]) -> dict:
    """The baseline table's number formats: times to four significant digits, the change as a signed percentage."""
    columns_shown = {c: {"kind": "number", "format": "%.4g"} for c in columns
            if c.startswith(("baseline (", "now (", "change ("))}
    return columns_shown | {"change (%)": {"kind": "number", "format": "%+.1f"}}
