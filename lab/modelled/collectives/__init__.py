"""Collectives, modelled: which bytes every device sends at every step of an all-reduce, and how long that takes.

* :mod:`.schedules` -- the step-by-step schedules of the four algorithms (ring, host, tree, hierarchical),
* :mod:`.timing` -- their time on a topology, nccl-tests' bandwidths, the uniform alpha-beta model and its fit,
* :mod:`.explore` -- ring orders, the synchronous versus asynchronous trigger, the sweeps of the All-reduce page.
"""
from lab.modelled.collectives.explore import (  # noqa: F401
    Setup,
    Timeline,
    best_ring_order,
    brute_force_ring_order,
    compare_algorithms,
    compute_times,
    given_ring_order,
    heuristic_ring_order,
    ring_hops,
    sweep_devices,
    sweep_sizes,
    sweep_uniform,
    trigger_timeline,
)
from lab.modelled.collectives.schedules import (  # noqa: F401
    CollectiveSchedule,
    Transfer,
    _Builder,
    build_schedule,
    check_explored,
    check_schedule,
    contribution_letter,
    default_host,
    default_names,
    default_participants,
    topology_groups,
    uniform_star,
)
from lab.modelled.collectives.timing import (  # noqa: F401
    BANDWIDTH_FORMULA,
    GEOMEAN_ERROR_DEFINITION,
    AlphaBetaFit,
    algbw,
    busbw,
    fit_alpha_beta,
    link_label,
    messages_time,
    schedule_time,
    uniform_time,
)
from lab.scenario.names import ALGORITHM_LABELS, ALGORITHMS  # noqa: F401
