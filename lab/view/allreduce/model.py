"""The All-reduce page's model of one all-reduce: who takes part and in which ring order, the schedule step by
step, how long it takes on the cluster's links, and a synchronous or asynchronous trigger. Every section is
modelled; lesson mode leaves out the advanced tables and figures (``lesson=True``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

from lab.comm.measure import human_bytes
from lab.memo import SharedCache
from lab.modelled import collectives
from lab.scenario.names import ALGORITHM_LABELS
from lab.scenario.topology import Topology
from lab.scenario.units import fmt_rate, fmt_seconds, time_unit
from lab.view.allreduce.tables import (algorithms_table, bytes_table, compute_from_table, compute_table, idle_table,
                                       ring_bytes_sentence, step_times_table, transfers_table)
from lab.view.section import Section
from lab.view.state import ALLREDUCE_SIZES, fit_range, fit_subset

INTRO = ("Every device holds a gradient buffer of S bytes; an all-reduce leaves the sum on every device. Step "
         "through the **ring** (the CXL design's worked example of four devices: reduce-scatter, each device adding "
         "the chunk it receives into its own and passing it on, then all-gather, the finished chunks going round), "
         "**host aggregation**, a binary **tree** and a two-level **hierarchical** all-reduce (inside each pool or "
         "resource group, then among the group leaders). Times come from the alpha-beta model on the topology's "
         "links: a message costs its route's latency plus bytes over the narrowest bandwidth on the route, a link "
         "crossed by k messages at once in one direction gives each 1/k, a step lasts as long as its slowest "
         "message.")
STEPS_HEAD = Section("ar_steps_head", header="Step by step", level="subheader")
TIMING_HEAD = Section("ar_timing_head", header="How long on this cluster", level="subheader")
TRIGGER_HEAD = Section("ar_trigger_head", header="Synchronous or asynchronous trigger", level="subheader")
STEP_CAPTION = ("the schedule itself: arrows are the messages of the chosen step (red = added into the receiver's "
                "chunk, blue = copied over it); the grid shows the contributions every device holds per chunk. The "
                "slider is the one step control: Previous and Next and its arrow keys move it a step, ▶ plays it.")
UNIFORM_CAPTION = ("no real topology is this large: every device on its own switch port with this ring's slowest hop "
                   "(α its largest hop latency); ring 2(N−1) steps of S/N, host 2 steps of N·S through the host's "
                   "port, tree 2·log2 N levels of up to 2·S.")
TRIGGER_CAPTION = ("sync: the host starts the all-reduce when the last device is done; async: each device starts when "
                   "it is done and waits only for the devices it exchanges with. Compute time = work / the device's "
                   "matmul FLOP/s (edit the table); messages take their lock-step times; idle = neither computing nor "
                   "communicating; blue over grey = a message arriving while the device still computes. A ring waits "
                   "for its slowest device either way: async saves only what can move before it is done.")
ALGBW_HELP = "algorithm bandwidth: the buffer per device S over the time t"
BUSBW_HELP = ("bus bandwidth as nccl-tests defines it: algbw × 2(N − 1)/N, what each link of a ring carries; it can be "
              "set against a link's own speed and compared across device counts")
#: The set-up's controls, as the page draws them: the devices (from the topology, or N identical ones), then
#: the algorithm, the buffer size and the ring order.
TOPOLOGY_KEYS, IDENTICAL_KEYS = ("ar_devices",), ("ar_n", "ar_bw", "ar_lat")


# What every session of a class asks for on one cluster (the ring orders, the chosen algorithm's time, the four
# algorithms compared, the sweeps against size and N, the trigger's timelines for the same compute times): computed
# once per value in this server process, shared, and kept for the values used last.
_ORDERS = SharedCache(32)
_SWEEPS = SharedCache(64)


@dataclass(frozen=True)
class AllReduce:
    """One all-reduce as the controls set it up: its devices on their cluster, the ring orders, the set-up of
    every algorithm's schedule, the chosen algorithm and buffer size per device."""

    cluster: Topology
    cluster_key: str  # the cluster's value (its JSON): what the shared orders and sweeps are kept by
    names: tuple[str, ...]
    algorithm: str
    nbytes: int
    given: Any  # lab.modelled.collectives.RingOrder: the ring as listed
    best: Any  # ... and in the lab's order
    chosen: Any
    setup: collectives.Setup

    @cached_property
    def schedule(self) -> collectives.CollectiveSchedule:
        """The chosen algorithm's schedule with every device's chunks after each step (the step-through)."""
        return self.setup.schedule(self.algorithm, self.nbytes, with_state=True)

    @property
    def steps(self) -> int:
        return len(self.schedule.steps)


def participant_fixes(topo: Topology, chosen: Sequence[str] | None) -> list[tuple[str, tuple, str | None]]:
    """The devices taking part after the topology changed (a new topology, or a link's default): those that still
    exist, else its defaults, as (key, value, notice) for the page to set before the picker is drawn."""
    before = tuple(chosen or ())
    fitted, changed = fit_subset(before, topo.device_names, collectives.default_participants(topo))
    if not changed:
        return []
    return [("ar_devices", fitted, None if not before else
             "The topology changed, so the devices taking part are now: " + ", ".join(fitted) + ".")]


def prepare(v: Mapping[str, Any], topo: Topology) -> AllReduce:
    """The all-reduce the controls ``v`` (keys of the view table) set up on ``topo``, or on N identical devices."""
    if v["ar_source"] == "topology":
        cluster, names = topo, list(v["ar_devices"])
    else:
        n = int(v["ar_n"])
        cluster, names = collectives.uniform_star(n, float(v["ar_bw"]) * 1e9, float(v["ar_lat"]) * 1e-6), collectives.default_names(n)
    collectives.check_explored(names)
    key = cluster.to_json(indent=None)
    given, best = _ORDERS.get((key, tuple(names)), lambda: (collectives.given_ring_order(cluster, names),
                                                            collectives.best_ring_order(cluster, names)))
    chosen = best if v["ar_order"] == "lab" else given
    setup = collectives.Setup(tuple(names), tuple(names.index(x) for x in chosen.names),
                    tuple(map(tuple, collectives.topology_groups(cluster, names))), collectives.default_host(cluster, names))
    return AllReduce(cluster, key, tuple(names), v["ar_alg"], int(v["ar_size"]), given, best, chosen, setup)


def sweeps(m: AllReduce) -> tuple[list[dict], dict, dict]:
    """The four algorithms at the chosen size, and every algorithm's time against size and against N (with the
    ring in the lab's order too), as kept for the cluster's value."""
    cluster, setup, nbytes = m.cluster, m.setup, m.nbytes
    curves = {a: (a, setup) for a in collectives.ALGORITHMS}
    curves["ring (lab order)"] = ("ring", collectives.Setup(setup.participants, tuple(m.names.index(x) for x in m.best.names),
                                                  setup.groups, setup.host))
    return _SWEEPS.get((m.cluster_key, setup, curves["ring (lab order)"][1], nbytes),
                       lambda: (collectives.compare_algorithms(cluster, setup, nbytes),
                                collectives.sweep_sizes(cluster, curves, list(ALLREDUCE_SIZES)),
                                collectives.sweep_devices(cluster, curves, nbytes)))


def ring(m: AllReduce, badge: str) -> Section:
    """The ring in the chosen order, its slowest hop in both orders, the host and the groups (``badge``: the
    page's modelled badge)."""
    return Section("ar_ring", intro=f"{badge} Ring: {{ring}}  \nSlowest hop: as listed "
                                    f"**{fmt_rate(m.given.slowest_hop_bandwidth)}**, lab's order **"
                                    f"{fmt_rate(m.best.slowest_hop_bandwidth)}** ({m.best.method}; links shared by "
                                    "hops counted).",
                   caption="Host aggregation: **{host}**. Groups: {groups}.",
                   values={"ring": " → ".join([*m.chosen.names, m.chosen.names[0]]), "host": m.setup.host,
                           "groups": "; ".join(", ".join(g) for g in m.setup.groups)})


# ---- step by step ---------------------------------------------------------------------------------

def step_fixes(m: AllReduce, step: int | None, playing: bool) -> list[tuple[str, int, str | None]]:
    """The step control before it is drawn: brought within this schedule's steps (with a notice), and back at the
    first when ▶ is pressed at the last (the tick must never switch the play off inside a full run, where its
    switch is already drawn)."""
    now, clamped = fit_range(step or 0, 0, m.steps)
    out = [("ar_step", now, f"This schedule has {m.steps} steps, so the step is now {now}.")] if clamped else []
    return out + [("ar_step", 0, None)] if playing and now >= m.steps else out


def moved_step(m: AllReduce, step: int | None, by: int) -> int | None:
    """The step ``by`` steps on from ``step`` (back when negative), or None past either end: what ▶'s tick and the
    Previous and Next buttons move the one step control to, as the slider's arrow keys move it by one."""
    to = (step or 0) + by
    return to if 0 <= to <= m.steps else None


def next_step(m: AllReduce, step: int | None) -> int | None:
    """The step a tick of ▶ moves to, or None after the last (the play stops)."""
    return moved_step(m, step, 1)


def step_buttons(m: AllReduce, step: int | None) -> list[tuple[str, str, str, int, bool]]:
    """Previous and Next beside the step slider, as (label, key, icon, the step it moves to, disabled): a button
    that would move past either end is disabled."""
    out = []
    for label, key, icon, by in (("Previous", "ar_prev", ":material/chevron_left:", -1),
                                 ("Next", "ar_next", ":material/chevron_right:", 1)):
        to = moved_step(m, step, by)
        out.append((label, key, icon, step or 0 if to is None else to, to is None))
    return out


def step_through(m: AllReduce, step: int) -> list[Section]:
    """The schedule at ``step`` (0 = before the first) and, after the first, that step's messages."""
    out = [Section("ar_steps", chart="allreduce.step_figure", kind="modelled", caption=STEP_CAPTION,
                   chart_input=dict(s=m.schedule, active=step, title=ALGORITHM_LABELS[m.algorithm]))]
    return out + [Section("ar_transfers", table=transfers_table(m.schedule, step))] if step else out


def bytes_moved(m: AllReduce) -> Section:
    return Section("ar_bytes", table=bytes_table(m.schedule, m.nbytes), kind="modelled",
                   caption=ring_bytes_sentence(len(m.names)))


# ---- how long -------------------------------------------------------------------------------------

def timing(m: AllReduce, lesson: bool = False) -> list[Section]:
    """The modelled time of the chosen algorithm, its slowest link, the four algorithms side by side, time against
    size and N; outside lesson mode also every step's time and the uniform model up to N = 1024."""
    cluster, setup, nbytes = m.cluster, m.setup, m.nbytes
    est = _SWEEPS.get((m.cluster_key, setup, m.algorithm, nbytes, "time"),
                      lambda: collectives.schedule_time(setup.schedule(m.algorithm, nbytes), cluster))
    rates = {x.bandwidth for s in est.steps for x in s.messages if x.nbytes > 0}
    scale, unit = time_unit(max(s.seconds for s in est.steps))
    out = [Section("ar_time", metrics=(("Modelled time", fmt_seconds(est.seconds)),
                                       ("algbw", fmt_rate(est.algbw), ALGBW_HELP),
                                       ("busbw", fmt_rate(est.busbw), BUSBW_HELP))),
           Section("ar_slowest", values={"link": collectives.link_label(cluster, est.bottleneck)},
                   intro="**Slowest link: {link}**, the narrowest hop of the slowest message in steps taking "
                         f"{100 * est.bottleneck_seconds / max(est.seconds, 1e-30):.0f}% of the time"
                         + (" (every message gets the same bandwidth here, so this is the first of equals)."
                            if len(rates) == 1 else ".")),
           Section("ar_formula", kind="modelled", text=f"$$\n{collectives.BANDWIDTH_FORMULA}\n$$",
                   caption="algbw and busbw as nccl-tests defines them for all-reduce (S = buffer per device, "
                           "t = time, N = devices):")]
    if not lesson:
        out.append(Section("ar_step_times", table=step_times_table(est, scale, unit), kind="modelled",
                           caption="every step of the chosen algorithm; a step lasts as long as its slowest message."))
    compared, by_size, by_n = sweeps(m)
    out.append(Section("ar_compare", table=algorithms_table(compared),
                       kind="modelled", values={"cluster": cluster.name},
                       caption=f"all four algorithms at S = {human_bytes(nbytes)} on {{cluster}}."))
    out += [Section("ar_vs_size", side="left", chart="allreduce.time_vs_size_figure", kind="modelled", chart_input=dict(
                series=by_size, title="time against buffer size")),
            Section("ar_vs_n", side="right", chart="allreduce.time_vs_n_figure", kind="modelled", chart_input=dict(
                series=by_n, title=f"time against N (first N devices), S = {human_bytes(nbytes)}")),
            Section("ar_sweeps", kind="modelled",
                    caption="on the chosen devices' links; against N, the first N devices of the ring order.")]
    return out if lesson else out + [uniform(m)]


def uniform(m: AllReduce) -> Section:
    """The closed-form model up to N = 1024 with this ring's slowest hop and largest hop latency."""
    hops = zip(m.chosen.names, m.chosen.names[1:] + m.chosen.names[:1])
    alpha = max(m.cluster.path(a, b).latency for a, b in hops)
    beta = 1 / m.chosen.slowest_hop_bandwidth
    return Section("ar_uniform", chart="allreduce.time_vs_n_figure", kind="modelled", caption=UNIFORM_CAPTION,
                   chart_input=dict(series=collectives.sweep_uniform([2 ** k for k in range(1, 11)], m.nbytes, alpha, beta),
                                    title=f"uniform model up to N = 1024: t = steps·α + bytes·β, α = "
                                          f"{fmt_seconds(alpha)}, β = 1/({fmt_rate(1 / beta)})", log_x=True))


# ---- the trigger ----------------------------------------------------------------------------------

def trigger_head(lesson: bool = False) -> list[Section]:
    """The trigger's header, left out in lesson mode (with its controls, which the table marks advanced)."""
    return [] if lesson else [TRIGGER_HEAD]


def compute(m: AllReduce, gflop: float):
    """Each device's compute time for ``gflop`` GFLOP of matrix multiplies, as the table the page edits."""
    return compute_table(m.names, collectives.compute_times(m.cluster, m.names, float(gflop) * 1e9))


def trigger(m: AllReduce, edited, lesson: bool = False) -> list[Section]:
    """The iteration's timeline under a synchronous and an asynchronous trigger, from the edited compute times;
    nothing in lesson mode."""
    if lesson:
        return []
    comp = compute_from_table(edited)
    plain = m.setup.schedule(m.algorithm, m.nbytes)
    tls = _SWEEPS.get((m.cluster_key, m.setup, m.algorithm, m.nbytes, "trigger", tuple(sorted(comp.items()))),
                      lambda: {mode: collectives.trigger_timeline(plain, m.cluster, comp, mode) for mode in ("sync", "async")})
    scale, unit = time_unit(max(t.makespan for t in tls.values()))
    return [Section("ar_trigger", chart="allreduce.trigger_figure", kind="modelled", caption=TRIGGER_CAPTION,
                    chart_input=dict(timelines=tls, scale=scale, unit=unit),
                    table=idle_table(tls, plain.nodes, scale, unit))]
