"""Placement: which device runs which operator of a model, by the datasheet cost model.

* :mod:`.graph` -- the task graph (operators, their times on each device, transfers) and a schedule of it,
* :mod:`.heuristics` -- list scheduling (earliest finish, HEFT) and the simple baselines,
* :mod:`.search` -- the contiguous pipeline partition and the exact optimum,
* :mod:`.explain` -- strategies by name, tables, why an operator went where it went, baselines kept.
"""
from lab.modelled.placement.explain import (  # noqa: F401
    STRATEGIES,
    STRATEGY_LABELS,
    compare_plans,
    compare_strategies,
    decision_order,
    device_usage,
    graph_for,
    model_task_graph,
    over_full,
    plan_assignment,
    plan_metrics,
    plan_record,
    reasons,
    run_strategy,
    schedule_table,
    strategy_comparison,
    task_labels,
    transfer_rows,
    why,
)
from lab.modelled.placement.graph import (  # noqa: F401
    OPTIMAL_MAX_TASKS,
    Device,
    PlacementSchedule,
    Task,
    TaskGraph,
)
from lab.modelled.placement.heuristics import (  # noqa: F401
    even_rounds,
    even_split,
    greedy_eft,
    heft,
    replay,
    round_robin,
    schedule_assignment,
    single_fastest,
    type_rule,
    upward_ranks,
)
from lab.modelled.placement.search import (  # noqa: F401
    ChainPlan,
    chain_dp,
    chain_partition,
    coarsen,
    optimal,
    partition_chain,
)

__all__ = ["TaskGraph", "PlacementSchedule", "greedy_eft", "heft", "optimal", "type_rule", "single_fastest", "round_robin", "even_split", "even_rounds", "chain_dp", "chain_partition", "partition_chain", "ChainPlan", "schedule_assignment", "replay", "coarsen", "compare_strategies", "schedule_table", "device_usage", "upward_ranks", "STRATEGIES", "STRATEGY_LABELS", "run_strategy", "model_task_graph", "OPTIMAL_MAX_TASKS", "why", "reasons", "decision_order", "transfer_rows", "plan_record", "compare_plans", "graph_for", "strategy_comparison",
           "plan_metrics", "task_labels", "over_full", "plan_assignment"]
