"""The Placement page's runs as sections: the plans run for real (the strategies ranked, one run drawn beside its
model) and the balancing loop run for real (every plan's step, each rule's rounds beside the simulated loop)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from lab.machine import plans
from lab.machine.profile import load_profile
from lab.store.runs import run_store
from lab.view.jobs import run_picker
from lab.view.placement import balance as balance_view
from lab.view.placement import plans as plans_view
from lab.view.placement import tables
from lab.view.section import Notice, Section

NO_PLAN_RUNS = "Run this plan (or every strategy) to see it measured here beside the model."
NO_BALANCE_RUNS = "Run the balancing loop to see it measured here beside the model."


class PlanRuns:
    """The placement runs the page shows (the link names them; a run deleted since is left out)."""

    def __init__(self, store: Any, run_ids: Iterable[str] | None, owner: str | None) -> None:
        self.store, self.owner = store, owner
        self.ids, self.active = plans_view.kept_runs(store, run_ids)

    def labeller(self) -> Callable[[str], str]:
        """How the "Run drawn" picker names each run."""
        _, labels = run_picker(self.store, self.owner, everyone=True, keep=self.ids)
        return lambda r: labels.get(r, r)

    def ranking(self) -> list[Section]:
        """The strategies the runs shown ran, ranked by the model and by the measurement (two runs or more), or
        a line saying how to get runs."""
        if not self.ids:
            return [Section("pl_runs_none", caption=NO_PLAN_RUNS)]
        if len(self.ids) < 2:
            return []
        prof = load_profile()
        rows, tau = plans_view.strategy_ranking(self.store, self.ids, prof)
        if not rows:
            return []
        return [Section("pl_rank", chart="plan_run.strategy_ranking_figure", kind="measured",
                        chart_input={"rows": rows, "title": "Strategies: modelled and measured step time"},
                        table=tables.ranking_table(rows),
                        caption=plans_view.ranking_line(tau, len(rows)) + " Modelled: " + plans.prediction_caveat(prof, 1)
                        + ".")]

    def drawn(self, run_id: str) -> list[Section]:
        """One run: its headline numbers, then its recorded step beside the modelled and replayed ones and each
        device's time (or a line saying it has recorded no step yet)."""
        out = plans.plan_outcome(self.store, run_id, load_profile())
        sections = [Section("pl_run_metrics", metrics=tuple(plans_view.outcome_metrics(out)))]
        if out["note"]:
            sections.append(Section("pl_run_note", caption="{note}", values={"note": out["note"]}))
        if not out["measured_rows"]:
            return sections + [Section("pl_run_wait", notices=(
                Notice(plans_view.waiting_line(out), "info", ":material/hourglass_top:"),))]
        return sections + [
            Section("pl_run_gantt", chart="plan_run.run_gantt_figure", kind="measured", caption=plans_view.gantt_caption(out),
                    chart_input=dict(measured=out["measured_rows"], modelled=out["modelled_rows"],
                                     devices=out["devices"], measured_badge=plans_view.measured_badge(out),
                                     title=plans_view.gantt_title(out), replayed=out["replay_rows"])),
            Section("pl_run_devices", table=tables.device_time_table(out["measured_rows"], out["devices"])),
            Section("pl_run_memory", table=plans_view.memory_table(out), caption=plans_view.memory_caption(out), kind="measured")]


class BalanceRuns:
    """The runs of the last balancing session the page queued, beside ``simulated`` (the loop the cost model
    simulates, by rule)."""

    def __init__(self, store: Any, run_ids: Iterable[str] | None, simulated: Mapping[str, Any] | None) -> None:
        self.store, self.simulated = store, simulated or {}
        self.ids, self.active = plans_view.kept_runs(store, run_ids)

    def sections(self, plain=str, badge=str) -> list[Section]:
        """Every plan's measured step beside the even layer split's; then per balancing run how it stands (``plain``
        makes its user text text; it ends with ``badge("measured")``) over its rounds beside the simulated loop's;
        then the caption under them. Without runs, a line saying how to get them."""
        if not self.ids:
            return [Section("pl_bal_none", caption=NO_BALANCE_RUNS)]
        outcome = Section("pl_bal_outcome", chart="plan_run.balance_outcome_figure", kind="measured",
                          chart_input={"rows": balance_view.balance_outcome(self.store, self.ids)},
                          caption=balance_view.BALANCE_OUTCOME_CAPTION)
        panels = [Section(f"pl_bal_{rid}", intro=f"{line} {badge('measured')}", chart="plan_run.balance_rounds_figure",
                          chart_input={"measured": measured, "modelled": modelled}, kind="measured")
                  for rid, line, measured, modelled in balance_view.balance_run_panels(self.store, self.ids, self.simulated,
                                                                            plain)]
        return [outcome, *panels, Section("pl_bal_rounds_caption", caption=balance_view.BALANCE_ROUNDS_CAPTION, kind="measured")]


__all__ = ["BalanceRuns", "NO_BALANCE_RUNS", "NO_PLAN_RUNS", "PlanRuns", "run_store"]
