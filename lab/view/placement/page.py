"""The Placement page's model: built once from the scenario and the page's controls, it holds the traced model,
the cost model, the task graph with the pins the model allows and the plan, and gives each part of the page as
:class:`lab.view.section.Section` objects (the runs' parts are :mod:`.runs`).

A pin the model or the topology refuses (an operator the model does not have, a device without a kernel for it)
is left out of the plan with a notice beside the pins; the rest of the page stays whole."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Mapping

from lab.errors import LabError
from lab.machine.calibrated_model import cost_model
from lab.machine.profile import load_profile
from lab.modelled import placement as pl
from lab.modelled.opgraph import trace
from lab.scenario.names import STRATEGY_SHORT
from lab.scenario.units import time_unit
from lab.view.placement import balance as balance_view
from lab.view.placement import plans as plans_view
from lab.view.placement import tables
from lab.view.section import Notice, Section


@lru_cache(maxsize=32)
def traced(model: str, batch: int, width: float = 1.0):
    """``model`` at ``width`` traced at ``batch`` (torch.fx), kept: tracing takes a while and the page redraws
    often."""
    return trace(model, batch, width=width)


def fitting_pins(graph, pins: Mapping[str, str]) -> tuple[dict[str, str], tuple[Notice, ...]]:
    """The pins task graph ``graph`` allows, and a notice for each one it refuses (an operator the model does not
    have, a device the topology does not have or without a kernel for it): that pin is left out of the plan."""
    kept, notices = {}, []
    for op, dev in pins.items():
        try:
            graph.with_pins({op: dev})
        except LabError as exc:
            notices.append(Notice(f"{exc}. The plan below leaves this pin out.", "warning", ":material/push_pin:"))
            continue
        kept[op] = dev
    return kept, tuple(notices)


NOT_CALIBRATED = ("The calibrated cost model is offered once this machine is calibrated (the Fidelity page, or "
                  "python -m lab.calibrate): until then the plan is priced from the topology's datasheet numbers.")


def cost_choice(current: Any) -> tuple[list[str], str]:
    """The cost models the page offers (the calibrated one only with this machine's profile) and the one in force:
    ``current``, or the first offered when ``current`` is not (a link's, or one chosen before the profile went).
    The cost model's caption says why one is missing (:meth:`PlacementView.cost_model`)."""
    from lab.scenario.names import COST_MODELS

    profile = load_profile()
    offered = [m for m in COST_MODELS if m != "calibrated" or profile is not None]
    return offered, (current if current in offered else offered[0])


def topology(topo) -> Section:
    """The scenario's topology and its devices with their types, in one caption."""
    return Section("pl_topology", caption="Topology **{name}**: {devices}. Change it on the Topology page.",
                   values={"name": topo.name, "devices": ", ".join(f"{d.name} ({d.type})" for d in topo.devices)})


PLAN_CONTROLS = ("pl_model", "pl_batch", "pl_strategy")


def pin_buttons(op: str, pins: Mapping[str, str]) -> list[tuple[str, str, str, bool]]:
    """(label, key, change, disabled) of the pin buttons beside the chosen operator and device."""
    return [("Pin", "pl_pin", "pin", False), ("Unpin", "pl_unpin", "unpin", op not in pins),
            ("Clear pins", "pl_pins_clear", "clear", not pins)]
RUN_CONTROLS = ("pl_micro", "pl_schedule", "pl_steps", "pl_repeats", "pl_emulate")
COMPARISON = "All strategies on this scenario"
RUN = Section("pl_run_intro", header="Run the plan: measured beside modelled", level="subheader", intro=plans_view.run_intro())
BALANCE = Section("pl_bal_intro", header="Dynamic load balancing: weights from each node's waiting time",
                  level="subheader", intro=balance_view.balance_intro())
BALANCE_RUN = Section("pl_bal_run_intro", header="The balancing loop, run: measured beside modelled",
                      level="subheader", intro=balance_view.balance_run_intro())


@dataclass
class Balancing:
    """The simulated balancing loop's parts: the sections above the tabs (:meth:`sections`: the figure and each
    rule's summary), a table of rounds per rule (one tab each, labelled :attr:`tabs`) and the caption under them."""

    head: list[Section]
    results: Mapping[str, Any]
    mode: str
    reference: float  # the round time of the plan (or split) made with the true speeds (s)
    scale: float
    unit: str
    rounds: list[Section]
    tail: Section

    @property
    def tabs(self) -> list[str]:
        return [f"rounds: {r}" for r in self.results]

    def lines(self, plain=str) -> list[str]:
        """How each rule's loop ended, its user text through ``plain``."""
        return [balance_view.balance_summary(r, res, self.mode, self.reference, self.scale, self.unit, plain)
                for r, res in self.results.items()]

    def sections(self, plain=str, badge=str) -> list[Section]:
        """The sections above the tabs: the head, then each rule's line (``plain`` makes its user text text,
        ``badge("modelled")`` is the badge it ends with)."""
        return self.head + [Section(f"pl_bal_line_{i}", text=f"{line} {badge('modelled')}.")
                            for i, line in enumerate(self.lines(plain))]


@dataclass
class PlacementView:
    """The page for one scenario and one set of the page's controls (model, batch, strategy, cost model)."""

    sc: Any
    model: str
    batch: int
    strategy: str
    cm_name: str
    og: Any
    cm: Any
    pins: dict
    applied: dict
    pin_notices: tuple
    graph: Any = None  # the task graph with the applied pins; None when the model cannot be placed at all
    failure: Exception | None = None  # why it cannot, raised where the plan is drawn
    balance_results: Mapping[str, Any] | None = None  # the simulated loop by rule, once drawn in model mode

    @classmethod
    def build(cls, sc, values: Mapping[str, Any]) -> "PlacementView":
        """Trace the model and price it (a LabError says what is missing, e.g. a machine profile); a failure to
        build the task graph is kept and raised by the parts that need it."""
        model, batch = values["pl_model"], int(values["pl_batch"])
        og, cm = traced(model, batch, sc.training.model_width), cost_model(values["pl_cost"], load_profile())
        pins = dict(sc.training.pins)
        view = cls(sc, model, batch, values["pl_strategy"], values["pl_cost"], og, cm, pins, {}, ())
        try:
            free = pl.TaskGraph.from_model(og, sc.topology, model=cm)
        except Exception as exc:  # noqa: BLE001 - shown once, where the plan is drawn (the page guards it)
            view.failure = exc
            return view
        view.applied, view.pin_notices = fitting_pins(free, pins)
        view.graph = free.with_pins(view.applied)
        return view

    # ----- what the widgets offer ----------------------------------------------------------------------
    @property
    def placeable(self) -> bool:
        return self.graph is not None

    @property
    def operators(self) -> list[str]:
        return list(self.og.names)

    @property
    def devices(self) -> list[str]:
        return list(self.sc.topology.device_names)

    @property
    def tasks(self) -> list[str]:
        """The operators of the graph the plan runs on, as the "why" panel offers them."""
        return [str(t) for t in self._placed[0].tasks]

    @property
    def slowdowns(self) -> dict[str, float]:
        """Each device's slowdown control and its default (the catalogue's fastest matmul device 20x)."""
        return {f"pl_slow_{n}": x for n, x in balance_view.default_slowdowns(self.sc.topology)[1].items()}

    @property
    def slowdown_picker(self) -> bool:
        """Whether the slowdowns are set one picked device at a time: past :data:`SLOWDOWN_BOXES` devices a box
        per device is a page of boxes nobody reads, and every box is a widget each rerun checks again."""
        return len(self.devices) > SLOWDOWN_BOXES

    def slowed(self, v: Mapping[str, Any]) -> Section:
        """The devices whose slowdown is not 1× under the balancing controls ``v`` (the picker's summary)."""
        rows = [{"device": n, "slowdown (×)": x} for n, x in _slowdown(v, self.devices).items() if x != 1.0]
        return Section("pl_slowed", table=rows or None, columns={"slowdown (×)": {"kind": "number", "format": "%g"}},
                       caption=SLOWED_CAPTION, values={"n": len(self.devices) - len(rows)})

    # ----- the plan ----------------------------------------------------------------------------------------
    @cached_property
    def _placed(self) -> tuple:
        if self.graph is None:
            raise self.failure
        return plans_view.placed(self.strategy, self.graph)

    def cost_model(self) -> Section:
        """The cost model that prices the plan, and the model's width when the Scenario scales it."""
        width = self.sc.training.model_width
        scaled = () if width == 1 else (Notice(
            f"{self.model} is built at width {width:g}× (the Scenario's model width, set on the Training page): its "
            "channels or hidden sizes are scaled, here and in the runs started below.", "info", ":material/width:"),)
        missing = " " + NOT_CALIBRATED if load_profile() is None else ""
        return Section("pl_cost_model", caption=plans_view.cost_model_line(self.cm) + missing, notices=scaled)

    def pinned(self) -> Section:
        """The pins in the scenario, and a notice for each one the plan leaves out."""
        text = plans_view.PINS_LINE if self.pins else plans_view.PINS_LINE.format(pins=plans_view.NO_PINS)
        return Section("pl_pins", intro=text, notices=self.pin_notices,
                       values={"pins": ", ".join(f"{t} → {d}" for t, d in self.pins.items())} if self.pins else {})

    def plan(self) -> list[Section]:
        """The plan's headline numbers, what the other cost model would do, and its Gantt chart."""
        shown, note, s, transfers, reasons = self._placed
        scale, unit = time_unit(s.makespan)
        metrics = tuple((label, str(value)) for label, value in pl.plan_metrics(s, len(self.og), transfers, scale,
                                                                                  unit))
        out = [Section("pl_plan", notices=(Notice(note, "info", ":material/info:"),) if note else (),
                       metrics=metrics)]
        if s.note:
            out.append(Section("pl_plan_note", caption=s.note))
        differs = plans_view.other_plan_line(self.strategy, self.og, self.sc.topology, self.applied, s.assignment,
                                    self.cm_name, load_profile())
        if differs:
            out.append(Section("pl_plan_other", caption="{line}", values={"line": differs}))
        out.append(Section("pl_gantt", chart="placement.gantt_figure", kind="modelled", chart_input=dict(
            rows=pl.schedule_table(shown, s), devices=shown.devices, transfers=transfers, reasons=reasons,
            title=f"{pl.STRATEGY_LABELS[self.strategy]}: one {self.cm.pass_}"), caption=tables.gantt_caption()))
        return out

    def explained(self, current: str | None) -> tuple[str, str | None] | None:
        """What the "why" panel's control becomes when ``current`` is not an operator of the graph (the first
        one, and a notice naming the one that went; None while it is)."""
        why, notice = plans_view.explained(self.tasks, current)
        return None if why == current else (why, notice)

    def why(self, task: str) -> tuple[Section, Section, Section]:
        """Why ``task`` is where it is: the finish on every device as a table (left) and a chart (right), and
        the caption under both."""
        shown, _, s, _, reasons = self._placed
        rows = pl.why(shown, s, task)
        return (Section("pl_why", table=tables.why_table(rows), kind="modelled",
                        text="**{task}** ({cls}): {reason}.",
                        values={"task": task, "cls": str(shown.task_class(task)), "reason": reasons[task]}),
                Section("pl_why_plot", chart="placement.why_figure", chart_input={"rows": rows, "task": task},
                        kind="modelled"),
                Section("pl_why_caption", caption=plans_view.why_caption(self.cm), kind="modelled"))

    @property
    def record(self) -> dict:
        """The plan as a baseline keeps it."""
        s = self._placed[2]
        return pl.plan_record(self.model, self.batch, self.strategy, self.applied, s, self.sc.topology, self.cm_name)

    @property
    def baseline(self) -> str:
        """The plan as the text the link keeps for "Keep this plan as the baseline"."""
        return plans_view.baseline_json(self.record)

    def against_baseline(self, text: str, badge=str) -> tuple[list[Section], str | None]:
        """The plan beside the baseline the link keeps as ``text``: (its sections, the summary's ending with
        ``badge("modelled")``; a notice when the link's baseline could not be read and is dropped)."""
        summary, rows, dropped = plans_view.against_baseline(text, self.record)
        if rows is None:
            return [Section("pl_base_none", caption=plans_view.NO_BASELINE)], dropped
        table = tables.baseline_table(rows)
        return [Section("pl_base_summary", text="**{summary}** " + badge("modelled"), values={"summary": summary}),
                Section("pl_base", table=table, columns=plans_view.baseline_columns(table[0]), kind="modelled",
                        caption=plans_view.BASELINE_CAPTION)], dropped

    def assignment(self) -> list[Section]:
        """Every operator's device and times, the operator graph coloured by device, each device's use and
        memory, and a warning for a device that holds more than its memory."""
        shown, _, s, _, reasons = self._placed
        scale, unit = time_unit(s.makespan)
        usage = pl.device_usage(shown, s)
        over = pl.over_full(usage)
        table = tables.assignment_table(pl.schedule_table(shown, s), scale, unit, reasons)
        return [
            Section("pl_assign", header="Assignment", level="subheader", kind="modelled", table=table,
                    columns=plans_view.assignment_columns(table), caption=plans_view.assignment_caption(unit)),
            Section("pl_dag", chart="placement.dag_figure", kind="modelled", caption=plans_view.DAG_CAPTION, chart_input=dict(
                tasks=shown.topological_order(), edges=shown.edges, device_of=s.assignment, devices=shown.devices,
                labels=pl.task_labels(shown), title="Operator graph coloured by device")),
            Section("pl_usage", side="left", chart="placement.usage_figure", kind="modelled",
                    chart_input={"rows": usage, "makespan": s.makespan}),
            Section("pl_memory", side="right", chart="placement.memory_figure", kind="modelled",
                    chart_input={"rows": usage}),
            Section("pl_memory_caption", caption=plans_view.MEMORY_CAPTION, kind="modelled"),
            *([Section("pl_over", notices=(Notice(f"Over-full: {', '.join(over)} hold more than their memory.",
                                                  "warning", ":material/warning:"),))] if over else []),
        ]

    def comparison(self) -> Section:
        """Every strategy on this graph (and on a coarsened one when the model is too big for the exact search)."""
        if self.graph is None:  # the plan above said why
            return Section("pl_compare", header=COMPARISON, level="subheader")
        rows, note = pl.strategy_comparison(self.graph)
        return Section("pl_compare", header=COMPARISON, level="subheader", intro=note,
                       chart="placement.comparison_figure", chart_input={"rows": rows},
                       table=tables.comparison_table(rows), columns=plans_view.COMPARISON_COLUMNS, kind="modelled",
                       caption=plans_view.comparison_caption(self.cm.pass_))

    # ----- runs --------------------------------------------------------------------------------------------
    def _run_sc(self, v: Mapping[str, Any]):
        """The scenario a run starts from: the page's, with only the pins its plan honours, in the schedule of
        the run controls ``v``."""
        return self.sc.replace(training=self.sc.training.replace(pins=tuple(self.applied.items()),
                                                                 schedule=v.get("pl_schedule", "gpipe")))

    def plan_items(self, v: Mapping[str, Any]) -> list[tuple]:
        """(scenario, run name) of "Run this plan": the plan shown, with the run controls ``v``."""
        one = plans_view.plan_scenario(self._run_sc(v), self.model, self.batch, self.strategy,
                              plans_view.assignment_of(self.graph, self.strategy), int(v["pl_micro"]), int(v["pl_steps"]),
                              v["pl_emulate"])
        return [(one, f"{STRATEGY_SHORT[self.strategy]} · {self.model}")]

    def strategy_items(self, v: Mapping[str, Any]) -> list[tuple]:
        """(scenario, run name) of "Run every strategy", each strategy's plan ``v["pl_repeats"]`` times."""
        return plans_view.strategy_scenarios(self._run_sc(v), self.graph, self.model, self.batch, int(v["pl_micro"]),
                                    int(v["pl_steps"]), v["pl_emulate"], int(v["pl_repeats"]))

    def balance_items(self, v: Mapping[str, Any]) -> list[tuple]:
        """(scenario, run name) of "Run the balancing loop": the loop with each rule, then its baselines."""
        # a re-made plan the schedule cannot run is not taken (the run says so in its rounds)
        return balance_view.balance_items(self._run_sc(v), self.graph, self.model, self.batch, int(v["pl_micro"]),
                               int(v["pl_round_steps"]), int(v["pl_rounds"]), v["pl_tol"], int(v["pl_patience"]),
                               _slowdown(v, self.devices), self.strategy)

    # ----- the balancing loop, simulated -------------------------------------------------------------------
    def slowdown_note(self) -> Section:
        fastest, _ = balance_view.default_slowdowns(self.sc.topology)
        return Section("pl_slow_note", caption=balance_view.SLOWDOWN_NOTE, values={"fastest": fastest})

    def balancing(self, v: Mapping[str, Any]) -> Balancing:
        """Both rules' loops for the balancing controls ``v`` (mode, slowdowns, knobs), simulated by the cost
        model."""
        if self.graph is None:
            raise self.failure
        mode = v["pl_bal_mode"]
        results, per_sample, nodes, ref = balance_view.balancing(
            self.graph, self.og, self.sc.topology, self.cm, mode, self.batch, _slowdown(v, self.devices),
            v["pl_noise"], v["pl_seed"], v["pl_tol"], v["pl_patience"], v["pl_rounds"])
        if mode == "model":
            self.balance_results = results
        scale, unit = tables.balance_time_unit(results)
        head = [Section("pl_bal_nodes", caption=balance_view.DATA_NODES_LINE,
                        values={"nodes": ", ".join(per_sample), "batch": self.batch})] if per_sample is not None else []
        head.append(Section("pl_balance", chart="placement.balance_figure", kind="modelled",
                            chart_input={"series": tables.balance_series(results), "nodes": nodes,
                                         "reference_time": ref},
                            caption="each round is simulated with the cost model at the true speeds, not run."))
        rounds = [Section(f"pl_rounds_{r}", table=tables.rounds_table(res, nodes, mode, scale, unit))
                  for r, res in results.items()]
        return Balancing(head, results, mode, ref, scale, unit, rounds,
                         Section("pl_rounds_caption", caption=balance_view.rounds_caption(mode), kind="modelled"))


#: The most devices that get a slowdown box each; a larger topology picks one device at a time.
SLOWDOWN_BOXES = 12
SLOWED_CAPTION = "The devices not at 1× are listed; the other {n} run at 1×. Pick a device to change its slowdown."


def _slowdown(v: Mapping[str, Any], devices) -> dict[str, float]:
    """Each device's slowdown among the balancing controls ``v``."""
    return {n: v[f"pl_slow_{n}"] for n in devices}


__all__ = ["BALANCE", "BALANCE_RUN", "Balancing", "COMPARISON", "PLAN_CONTROLS", "PlacementView", "RUN",
           "RUN_CONTROLS", "fitting_pins", "topology", "traced"]
