"""The Placement page's model: what it shows that is not a figure, of a plan and its runs (:mod:`.plans`) and
of the balancing loop (:mod:`.balancing`)."""

from lab.view.placement.balancing import (
    BALANCE_BASELINES, BALANCE_KNOBS, BALANCE_MODES, BALANCE_OUTCOME_CAPTION, BALANCE_ROUNDS_CAPTION,
    MAX_BALANCE_RUN_STEPS, balance_intro, balance_items, balance_outcome, balance_planner, balance_run_intro,
    balance_run_line, balance_run_panels, balance_run_rows, balance_scenario, balance_summary, balancing,
    data_nodes_line, default_slowdowns, measured_plan_step, modelled_rounds_rows, plan_key, rounds_caption,
    run_balancing, slowdown_note
)
from lab.view.placement.plans import (
    BASELINE_CAPTION, COMPARISON_COLUMNS, DAG_CAPTION, INTRO, MAX_SHOWN_RUNS, MEMORY_CAPTION, NO_BASELINE,
    WHY_CAPTION, against_baseline, assignment_caption, assignment_of, baseline_columns, baseline_from_json,
    baseline_json, changed_pins, comparison_caption, cost_model_line, explained, gantt_caption, gantt_title,
    kept_runs, measured_badge, other_plan_line, outcome_metrics, pins_line, placed, plan_scenario, ranking_line,
    run_exists, run_intro, shown_runs, strategy_ranking, strategy_scenarios, topology_line, waiting_line,
    why_caption
)

__all__ = ["BALANCE_BASELINES", "BALANCE_KNOBS", "BALANCE_MODES", "BALANCE_OUTCOME_CAPTION", "BALANCE_ROUNDS_CAPTION", "MAX_BALANCE_RUN_STEPS", "balance_intro", "balance_items", "balance_outcome", "balance_planner", "balance_run_intro", "balance_run_line", "balance_run_panels", "balance_run_rows", "balance_scenario", "balance_summary", "balancing", "data_nodes_line", "default_slowdowns", "measured_plan_step", "modelled_rounds_rows", "plan_key", "rounds_caption", "run_balancing", "slowdown_note", "BASELINE_CAPTION", "COMPARISON_COLUMNS", "DAG_CAPTION", "INTRO", "MAX_SHOWN_RUNS", "MEMORY_CAPTION", "NO_BASELINE", "WHY_CAPTION", "against_baseline", "assignment_caption", "assignment_of", "baseline_columns", "baseline_from_json", "baseline_json", "changed_pins", "comparison_caption", "cost_model_line", "explained", "gantt_caption", "gantt_title", "kept_runs", "measured_badge", "other_plan_line", "outcome_metrics", "pins_line", "placed", "plan_scenario", "ranking_line", "run_exists", "run_intro", "shown_runs", "strategy_ranking", "strategy_scenarios", "topology_line", "waiting_line", "why_caption"]
