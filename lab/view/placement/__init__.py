"""The Placement page's model: the page built once from the scenario and its controls, as sections
(:mod:`.page`), the runs it shows (:mod:`.runs`), and below them what it says of a plan and its runs
(:mod:`.plans`) and of the balancing loop (:mod:`.balance`)."""

from lab.view.desk import Desk
from lab.view.placement.balance import (
    BALANCE_BASELINES, BALANCE_KNOBS, BALANCE_MODES, BALANCE_OUTCOME_CAPTION, BALANCE_ROUNDS_CAPTION, DATA_NODES_LINE,
    MAX_BALANCE_RUN_STEPS, SLOWDOWN_NOTE, balance_intro, balance_items, balance_outcome, balance_planner,
    balance_run_intro, balance_run_line, balance_run_panels, balance_run_rows, balance_scenario, balance_summary,
    balancing, data_nodes_line, default_slowdowns, measured_plan_step, modelled_rounds_rows, plan_key,
    rounds_caption, run_balancing, slowdown_note
)
from lab.view.placement.page import (
    BALANCE, BALANCE_RUN, NOT_CALIBRATED, PLAN_CONTROLS, RUN, RUN_CONTROLS, Balancing, PlacementView,
    cost_choice, fitting_pins, pin_buttons, topology, traced
)
from lab.view.placement.plans import (
    BASELINE_CAPTION, COMPARISON_COLUMNS, DAG_CAPTION, INTRO, MAX_SHOWN_RUNS, MEMORY_CAPTION, NO_BASELINE, NO_PINS,
    PINS_LINE, WHY_CAPTION, against_baseline, assignment_caption, assignment_columns, assignment_of, baseline_columns,
    baseline_from_json, baseline_json, changed_pins, comparison_caption, cost_model_line, explained, gantt_caption,
    gantt_title, kept_runs, measured_badge, other_plan_line, outcome_metrics, pins_line, placed, plan_scenario,
    ranking_line, run_exists, run_intro, shown_runs, strategy_ranking, strategy_scenarios, waiting_line, why_caption,
    with_pins
)
from lab.view.placement.runs import NO_BALANCE_RUNS, NO_PLAN_RUNS, BalanceRuns, PlanRuns, run_store
from lab.view.placement import tables, upload

__all__ = [
    "upload", "tables", "pin_buttons", "Desk",
    # the balancing loop
    "BALANCE_BASELINES", "BALANCE_KNOBS", "BALANCE_MODES", "BALANCE_OUTCOME_CAPTION", "BALANCE_ROUNDS_CAPTION",
    "DATA_NODES_LINE", "MAX_BALANCE_RUN_STEPS", "SLOWDOWN_NOTE", "balance_intro", "balance_items", "balance_outcome",
    "balance_planner", "balance_run_intro", "balance_run_line", "balance_run_panels", "balance_run_rows",
    "balance_scenario", "balance_summary", "balancing", "data_nodes_line", "default_slowdowns", "measured_plan_step",
    "modelled_rounds_rows", "plan_key", "rounds_caption", "run_balancing", "slowdown_note",
    # the page
    "BALANCE", "BALANCE_RUN", "NOT_CALIBRATED", "PLAN_CONTROLS", "RUN", "RUN_CONTROLS", "Balancing", "PlacementView",
    "cost_choice", "fitting_pins", "topology", "traced",
    # a plan and its runs
    "BASELINE_CAPTION", "COMPARISON_COLUMNS", "DAG_CAPTION", "INTRO", "MAX_SHOWN_RUNS", "MEMORY_CAPTION",
    "NO_BASELINE", "NO_PINS", "PINS_LINE", "WHY_CAPTION", "against_baseline", "assignment_caption",
    "assignment_columns", "assignment_of",
    "baseline_columns", "baseline_from_json", "baseline_json", "changed_pins", "comparison_caption",
    "cost_model_line", "explained", "gantt_caption", "gantt_title", "kept_runs", "measured_badge", "other_plan_line",
    "outcome_metrics", "pins_line", "placed", "plan_scenario", "ranking_line", "run_exists", "run_intro",
    "shown_runs", "strategy_ranking", "strategy_scenarios", "waiting_line", "why_caption", "with_pins",
    # the runs shown
    "NO_BALANCE_RUNS", "NO_PLAN_RUNS", "BalanceRuns", "PlanRuns", "run_store",
]
