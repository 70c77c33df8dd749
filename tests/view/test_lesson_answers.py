"""The lessons' questions: every answer in assets/lessons/index.json is what its page shows.

Each question's answer is recomputed here from the lesson's scenario and view (the controls a step sets
added on top) with the same lab calls its page makes, so a change in the lab that changes what a page shows
fails here rather than leaving a lesson that marks a right answer wrong. The course itself is checked too:
enough lessons, one for every page but Home, and one for every claim on the About page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app import PAGES
from lab.view import state
from lab.view.lessons import Lesson, load_lessons
from tests.conftest import ROOT

FOLDER = ROOT / "assets" / "lessons"
LESSONS = load_lessons(FOLDER)
BY_ID = {x.id: x for x in LESSONS}
#: The controls a lesson may hide: the ones whose pages draw them through ui.hidden.
HIDEABLE = {"ar_source", "ar_order", "ar_size", "ar_alg", "pl_cost", "pl_batch", "topo_cmp", "topo_size"}


def about_claims() -> list[str]:
    """Every claim of the About page, from its page model's table of designs."""
    from lab.view.about import DESIGNS

    return [claim[0] for _, _, claims in DESIGNS for claim in claims]


def view_of(lesson: Lesson, **step: Any) -> dict[str, Any]:
    """The controls as the lesson opens its page (the table's defaults, the lesson's view on top), with
    what a step sets on top of those."""
    return {**state.defaults(lesson.scenario(FOLDER)), **lesson.view, **step}


# ---- the pages' calls, as each page makes them --------------------------------------------------------------
def topology_span(lesson: Lesson, topo=None, **step) -> tuple[float, float]:
    """pages/topology.py: the range of other-time / this-time over the device pairs, as its sentence says it."""
    from lab.view import topology_tables as tables

    v = view_of(lesson, **step)
    topo = topo or lesson.scenario(FOLDER).topology
    other, label = tables.comparison_target(topo, v["topo_cmp"])
    _, span = tables.compare_designs(topo, other, v["topo_size"] * 1e6, ("this cluster", label))
    return span


def shown_ratio(span: tuple[float, float]) -> float:
    """The one ratio the Topology page's sentence prints when the range is that narrow."""
    lo, hi = span
    assert hi - lo < 0.005, span
    return lo


def placement_graph(lesson: Lesson, **step):
    """pages/placement.py: the task graph of the view's model and batch on the scenario's topology, with the
    scenario's pins (the lessons use the datasheet cost model, which needs no machine profile)."""
    from lab.machine.calibrated_model import cost_model
    from lab.modelled import placement as pl
    from lab.modelled.opgraph import trace

    sc, v = lesson.scenario(FOLDER), view_of(lesson, **step)
    assert v["pl_cost"] == "datasheet"
    og = trace(v["pl_model"], int(v["pl_batch"]))
    return pl.TaskGraph.from_model(og, sc.topology, model=cost_model("datasheet", None)).with_pins(
        dict(sc.training.pins)), og


def gap_percent(lesson: Lesson, strategy: str, **step) -> float:
    """The "above optimum (%)" cell of ``strategy`` in the page's "All strategies on this scenario" table (the
    coarsened graph's row when the model is too big for the exact search, as the page's note says)."""
    from lab.view.placement.tables import comparison_table
    from lab.modelled import placement as pl
    from lab.scenario.names import STRATEGY_LABELS

    g, _ = placement_graph(lesson, **step)
    rows, _ = pl.strategy_comparison(g)
    cells = [r["above optimum (%)"] for r in comparison_table(rows)
             if r["strategy"] == STRATEGY_LABELS[strategy] and r["above optimum (%)"] is not None]
    assert cells, strategy
    return cells[-1]


def shown_plan(lesson: Lesson, **step):
    """The plan the Placement page draws for the view's strategy, on the graph it runs on."""
    from lab.modelled import placement as pl

    g, og = placement_graph(lesson, **step)
    strategy = view_of(lesson, **step)["pl_strategy"]
    shown, _ = pl.graph_for(strategy, g)
    return shown, pl.run_strategy(strategy, shown).validate(shown), og


def balancing(lesson: Lesson, **step):
    """pages/placement.py's balancing loop (both rules), with the lesson's knobs and slowdowns."""
    from lab.machine.calibrated_model import cost_model
    from lab.modelled.balance import per_sample_times
    from lab.view import placement as pv

    sc, v = lesson.scenario(FOLDER), view_of(lesson, **step)
    g, og = placement_graph(lesson, **step)
    _, slow = pv.default_slowdowns(sc.topology)
    slow = {n: v.get(f"pl_slow_{n}", slow[n]) for n in sc.topology.device_names}
    per = (per_sample_times(og, sc.topology, model=cost_model("datasheet", None))
           if v["pl_bal_mode"] == "data" else None)
    return pv.run_balancing(g, per, int(v["pl_batch"]), slow, v["pl_noise"], v["pl_seed"], v["pl_tol"],
                            v["pl_patience"], v["pl_rounds"])


def allreduce(lesson: Lesson, **step):
    """pages/allreduce.py's set-up: the cluster, the devices taking part and the Setup in the chosen ring order."""
    from lab.modelled import collectives

    sc, v = lesson.scenario(FOLDER), view_of(lesson, **step)
    assert v["ar_source"] == "topology"
    cluster, names = sc.topology, list(v["ar_devices"])
    given, best = collectives.given_ring_order(cluster, names), collectives.best_ring_order(cluster, names)
    chosen = best if v["ar_order"] == "lab" else given
    setup = collectives.Setup(tuple(names), tuple(names.index(x) for x in chosen.names),
                    tuple(map(tuple, collectives.topology_groups(cluster, names))), collectives.default_host(cluster, names))
    return cluster, names, setup, v


def allreduce_times(lesson: Lesson, **step) -> dict[str, float]:
    """The page's table of the four algorithms: algorithm -> modelled seconds."""
    from lab.modelled import collectives

    cluster, _, setup, v = allreduce(lesson, **step)
    return {r["algorithm"]: r["seconds"] for r in collectives.compare_algorithms(cluster, setup, v["ar_size"])}


def sent_over_s(lesson: Lesson, **step) -> dict[str, float]:
    """The bytes table's "sent / S" column of the view's algorithm, by device."""
    _, _, setup, v = allreduce(lesson, **step)
    sched = setup.schedule(v["ar_alg"], v["ar_size"], with_state=True)
    return {n: b / v["ar_size"] for n, b in zip(sched.nodes, sched.sent_bytes())}


def triggers(lesson: Lesson, **step):
    """The trigger section: both timelines, from the compute times of the view's work per device."""
    from lab.modelled import collectives

    cluster, names, setup, v = allreduce(lesson, **step)
    comp = collectives.compute_times(cluster, names, v["ar_work"] * 1e9)
    plain = setup.schedule(v["ar_alg"], v["ar_size"])
    return {m: collectives.trigger_timeline(plain, cluster, comp, m) for m in ("sync", "async")}


def counterexample(lesson: Lesson, **step):
    """pages/optimisers.py's run of Adam's counterexample with the view's settings."""
    from lab.optim.playground import run_counterexample

    v = view_of(lesson, **step)
    return run_counterexample(tuple(v["ce_opts"]), steps=int(v["ce_steps"]), lr=float(v["ce_lr"]),
                              schedule=v["ce_schedule"])


def where_x(run, name: str) -> str:
    """Where an optimiser ends (the mean of x over the last period), in the words of the lessons' choices."""
    now = run.period_mean(name)
    if now >= 0.9:
        return "near x = +1, the worst point"
    if now <= -0.9:
        return "near x = −1, the optimum"
    return "in between, on the side of +1 (x > 0)" if now > 0 else "in between, on the side of −1 (x < 0)"


def compression_inputs(lesson: Lesson, **step) -> tuple[dict, int, int]:
    """The Compression page's view with the group size and seed it uses in lesson mode (the scenario's)."""
    sc = lesson.scenario(FOLDER)
    return view_of(lesson, **step), int(min(sc.training.compression.group_size, 65536)), int(sc.training.seed)


def compressor_rows(lesson: Lesson, **step) -> list[dict]:
    """The table of compressors on one gradient."""
    import torch

    from lab.compression.study import evaluate, generated_gradients, real_gradients

    v, group, seed = compression_inputs(lesson, **step)
    grads = (real_gradients(v["cp_model"], 1, int(v["cp_batch"]), seed) if v["cp_source"] == "real"
             else generated_gradients(int(v["cp_n"]), 1, seed))
    return evaluate(torch.from_numpy(grads[0].numpy()), ratios=tuple(sorted(v["cp_ratios"])), group_size=group,
                    seed=seed)


def ring_report(lesson: Lesson, **step):
    """The sparse ring simulated on the workers' gradients: (fill-in rows, hop rows, sharing)."""
    from lab.view.sharing import sharing_report
    from lab.compression.study import generated_gradients, real_gradients

    v, group, seed = compression_inputs(lesson, **step)
    workers = int(v["ring_workers"])
    grads = (real_gradients(v["cp_model"], workers, int(v["cp_batch"]), seed) if v["cp_source"] == "real"
             else generated_gradients(int(v["cp_n"]), workers, seed))
    return sharing_report([g.numpy() for g in grads], v["ring_kind"], float(v["ring_ratio"]), group, seed)


def cholesky(lesson: Lesson, **step) -> dict:
    """The Cholesky section's study (in lesson mode the damping is the table's default)."""
    from lab.compression import cholesky as chol

    v, _, seed = compression_inputs(lesson, **step)
    return chol.study(chol.example_matrices(seed, int(v["ch_batch"]), state.VIEW["ch_damping"].setting.default,
                                            int(v["ch_workers"]), bool(v["ch_by_class"]))[v["ch_matrix"]])


def whatif(topology_name: str):
    """The Jobs page's scheduling what-if with its own table of six jobs and no cap, on a preset."""
    from lab.view import jobs as job_views
    from lab.modelled.scheduling import compare_policies, resource_groups
    from lab.scenario.catalogue import preset

    groups = resource_groups(preset(topology_name))
    return compare_policies(groups, job_views.whatif_requests(pd.DataFrame(job_views.WHATIF_JOBS)), None)


# ---- the answer of every question: (lesson id, step) -> the value the page shows (and its unit, if timed) ----
def _cxl_ratio_10mb(x):
    return shown_ratio(topology_span(x))


def _cxl_ratio_1kb(x):
    return shown_ratio(topology_span(x, topo_size=0.001))


def _cxl_slow_gpu_link(x):
    from dataclasses import replace

    topo = x.scenario(FOLDER).topology
    # The step's edit on the Topology page: the link gpu – cxl-switch at 16 GB/s.
    edited = replace(topo, links=tuple(replace(l, bandwidth=16e9) if {l.a, l.b} == {"gpu", "cxl-switch"} else l
                                       for l in topo.links))
    lo, hi = topology_span(x, topo=edited)
    return ("this cluster is faster for every pair" if lo > 1.0005 else
            "this cluster is slower for every pair" if hi < 0.9995 else "neither is faster for every pair")


def _type_rule_gap(x):
    return gap_percent(x, "type_rule")


def _optimum_devices(x):
    _, s, _ = shown_plan(x, pl_strategy="optimal")
    used = set(s.assignment.values())
    return f"every operator on the {used.pop()}" if len(used) == 1 else "on several devices"


def _devices_used(x):
    from lab.figures.placement import time_unit
    from lab.modelled import placement as pl

    shown, s, og = shown_plan(x)
    scale, unit = time_unit(s.makespan)
    return dict(pl.plan_metrics(s, len(og), pl.transfer_rows(shown, s), scale, unit))["Devices used"]


def _next_best_times(x):
    from lab.modelled import placement as pl

    shown, s, _ = shown_plan(x)
    why = view_of(x)["pl_why"]
    found = re.search(r"next best \S+ ([0-9.]+)x as long", pl.reasons(shown, s)[why])
    assert found, pl.reasons(shown, s)[why]
    return float(found.group(1))


def _single_fastest_gap(x):
    return gap_percent(x, "single_fastest")


def _wait_rounds(x):
    return len(balancing(x)["wait"].rounds)


def _closer_rule(x):
    from lab.modelled.balance import RULE_LABELS

    res = balancing(x)
    ref = res["wait"].reference["round_time"]
    off = {r: abs(v.final.round_time / ref - 1.0) for r, v in res.items()}
    best = min(off, key=off.get)
    assert off[best] < 0.5 * max(off.values()), off  # a clear winner, not a tie within noise
    return f"{best} ({RULE_LABELS[best]})"


def _host_sent(x):
    return sent_over_s(x)[allreduce(x)[2].host]


def _host_over_ring(x):
    t = allreduce_times(x)
    return t["host"] / t["ring"]


def _fastest_at_4k(x):
    from lab.modelled import collectives

    t = allreduce_times(x, ar_size=4 << 10)
    return collectives.ALGORITHM_LABELS[min(t, key=t.get)]


def _ring_sent(x):
    sent = {round(s, 9) for s in sent_over_s(x).values()}
    assert len(sent) == 1, sent
    return sent.pop()


def _lab_order_time(x):
    from lab.figures.style import time_unit
    from lab.modelled import collectives

    cluster, _, setup, v = allreduce(x, ar_order="lab")
    seconds = collectives.schedule_time(setup.schedule(v["ar_alg"], v["ar_size"]), cluster).seconds
    scale, unit = time_unit(seconds)
    return seconds * scale, unit


def _first_trigger(x):
    tls = triggers(x)
    a, b = tls["sync"].makespan, tls["async"].makespan
    if math.isclose(a, b, rel_tol=1e-9):
        return "both at the same time"
    return "synchronous" if a < b else "asynchronous"


def _gpu_idle_async_64m(x):
    from lab.figures.style import time_unit

    tls = triggers(x, ar_size=64 << 20)
    scale, unit = time_unit(max(t.makespan for t in tls.values()))  # the idle table's unit
    return tls["async"].idle["gpu"] * scale, unit


def _adam_where(x):
    return where_x(counterexample(x), "adam")


def _max_where(x):
    return where_x(counterexample(x), "maxadabelief")


def _max_where_constant(x):
    return where_x(counterexample(x, ce_schedule="constant"), "maxadabelief")


def _factor_values(x):
    rows = {r["method"]: r["values"] for r in cholesky(x)["methods"]}
    assert rows["Cholesky factor L"] == rows["lower triangle (no factorisation)"]
    return rows["Cholesky factor L"]


def _sum_of_factors_error(x):
    return 100 * cholesky(x)["sum"]["rel_error_of_sum_of_factors"]


def _why_no_factor(x):
    a = cholesky(x, ch_matrix="weight gradient, transformer q (32x32)")["applicability"]
    return ("it is not square" if not a["square"] else "it is not symmetric" if not a["symmetric"] else
            "it is symmetric but not positive-definite" if not a["positive_definite"] else "it has a factor")


def _support(x):
    return ring_report(x)[2]["support"]


def _block0_after_reduce_scatter(x):
    fill = ring_report(x)[0]
    last = max(r["index"] for r in fill if r["phase"] == "reduce-scatter")
    return next(r["entries"] for r in fill if r["block"] == 0 and r["index"] == last)


def _group_topk_row(x, ratio=0.01):
    return next(r for r in compressor_rows(x) if r["compressor"] == "group_topk" and r["ratio"] == ratio)


def _group_topk_bytes(x):
    return _group_topk_row(x)["bytes"]


def _group_topk_error(x):
    return 100 * _group_topk_row(x)["rel_error"]


def _after_the_kill(x):
    from lab.scenario.names import FAULT_KINDS, FAULT_POLICIES
    from lab.train.launcher import without_worker
    from lab.train.layout import check_scenario

    sc = x.scenario(FOLDER)
    tr = sc.training
    # The drill's form as the page draws it: the first fault kind, worker 1, step 7, the first policy offered,
    # a checkpoint every 5 steps.
    kind, policy = next(k for k in FAULT_KINDS if k != "none"), sorted(FAULT_POLICIES, reverse=True)[0]
    workers, who, at_step, every = max(2, tr.workers), 1, 7, 5
    drill = sc.replace(training=tr.replace(workers=workers, steps=max(tr.steps, at_step + 10), fault=kind,
                                           fault_worker=who, fault_step=at_step, fault_policy=policy,
                                           checkpoint_every=every))
    check_scenario(drill)
    assert kind == "kill" and policy == "recover" and 0 < every < at_step  # a checkpoint exists before the kill
    again = without_worker(drill, who).training.workers
    assert again == workers - 1
    return f"it restarted from its last checkpoint without the failed worker, with {again} workers"


def _uniform_makespan(x):
    return round(whatif("gpu-npu")["uniform"].makespan, 1)


def _first_policy(x):
    from lab.modelled.scheduling import POLICY_LABELS

    s = whatif("gpu-npu")
    best = min(s, key=lambda p: s[p].makespan)
    return POLICY_LABELS[best].split(" (")[0]


def _never_start(x):
    return len(whatif("two-pools")["resource_state"].unplaceable)


def _worker0_shard(x):
    from lab.train import data as data_mod

    tr = x.scenario(FOLDER).training
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    return len(data_mod.make_shards(ds.y_train, tr.workers, tr.split, alpha=tr.dirichlet_alpha, seed=tr.seed)[0])


def _comparison_items(x):
    from lab.jobs.variants import comparison_compressions, comparison_scenarios

    sc = x.scenario(FOLDER)
    return comparison_scenarios(sc, comparison_compressions(sc.training.compression),
                                state.VIEW["tr_repeats"].setting.default)  # lesson mode: the default repeats


def _runs_queued(x):
    return len(_comparison_items(x))


def _variants(x):
    from lab.jobs.variants import settings_of, variant_key

    return len({variant_key(settings_of(s.to_dict())) for s, _ in _comparison_items(x)})


def _preset_batch_runs(x):
    from lab.machine.fidelity import preset_batch

    return len(preset_batch(steps=state.VIEW["fid_steps"].setting.default))


def _claims(x):
    return len(about_claims())


def _largest_part_edge(x):
    from lab.machine.calibrated_model import cost_model
    from lab.modelled import placement as pl
    from lab.modelled.opgraph import trace
    from lab.scenario.models import build_model
    from lab.train.emulation import ring_allreduce_time

    tr = x.scenario(FOLDER).training
    topo = x.scenario(FOLDER).topology
    devices = tuple(tr.worker_devices)
    # The uncompressed run's gradient all-reduce (every parameter and the loss, float32), waited on the drawn
    # links as the worker emulates them, against the modelled compute of one step on the same edge device
    # (forward from the datasheet, backward taken as twice the forward).
    params = sum(p.numel() for p in build_model(tr.model, seed=tr.seed).parameters())
    comm = ring_allreduce_time(topo, devices, 4 * (params + 1))
    g = pl.TaskGraph.from_model(trace(tr.model, tr.batch_size), topo, model=cost_model("datasheet", None))
    compute = 3 * sum(g.compute_time(t, devices[0]) for t in g.tasks)
    assert comm / (comm + compute) > 0.8, (comm, compute)
    return "communication (mostly the emulated link wait)"


def _plan_makespan(x):
    from lab.figures.placement import time_unit

    _, s, _ = shown_plan(x)
    scale, unit = time_unit(s.makespan)
    return s.makespan * scale, unit


def _fpga_peak_share(x, schedule: str = "1f1b"):
    from lab.machine.plan_memory import modelled_peaks
    from lab.view.placement import plans

    v = view_of(x, pl_schedule=schedule)  # the step's change
    shown, _, _ = shown_plan(x)
    sc = x.scenario(FOLDER)
    sc = sc.replace(training=sc.training.replace(schedule=v["pl_schedule"]))
    run = plans.plan_scenario(sc, v["pl_model"], v["pl_batch"], v["pl_strategy"],
                          plans.assignment_of(shown, v["pl_strategy"]), v["pl_micro"], v["pl_steps"], v["pl_emulate"])
    gpipe = run.replace(training=run.training.replace(schedule="gpipe"))
    return modelled_peaks(run)["fpga"] / modelled_peaks(gpipe)["fpga"]


ANSWERS: dict[tuple[str, int], Callable[[Lesson], Any]] = {
    ("ring-allreduce", 3): _ring_sent,
    ("slowest-link", 2): _lab_order_time,
    ("edge-compression", 3): _largest_part_edge,
    ("run-the-plan", 1): _plan_makespan,
    ("pipeline-schedules", 3): _fpga_peak_share,
    ("interleaved-schedule", 3): lambda x: _fpga_peak_share(x, "interleaved_1f1b"),
    ("cxl-vs-pcie", 2): _cxl_ratio_10mb,
    ("cxl-vs-pcie", 3): _cxl_ratio_1kb,
    ("cxl-vs-pcie", 5): _cxl_slow_gpu_link,
    ("type-rule", 2): _type_rule_gap,
    ("type-rule", 3): _optimum_devices,
    ("greedy-plan", 1): _devices_used,
    ("greedy-plan", 2): _next_best_times,
    ("greedy-plan", 3): _single_fastest_gap,
    ("balancing-loop", 2): _wait_rounds,
    ("balancing-loop", 3): _closer_rule,
    ("tree-host-ring", 1): _host_sent,
    ("tree-host-ring", 2): _host_over_ring,
    ("tree-host-ring", 4): _fastest_at_4k,
    ("sync-async", 3): _first_trigger,
    ("sync-async", 4): _gpu_idle_async_64m,
    ("amsgrad", 1): _adam_where,
    ("amsgrad", 2): _max_where,
    ("amsgrad", 4): _max_where_constant,
    ("cholesky", 2): _factor_values,
    ("cholesky", 4): _sum_of_factors_error,
    ("cholesky", 5): _why_no_factor,
    ("fill-in", 1): _support,
    ("fill-in", 2): _block0_after_reduce_scatter,
    ("group-topk", 2): _group_topk_bytes,
    ("group-topk", 3): _group_topk_error,
    ("fault-recovery", 3): _after_the_kill,
    ("scheduling-policies", 2): _uniform_makespan,
    ("scheduling-policies", 3): _first_policy,
    ("scheduling-policies", 4): _never_start,
    ("data-exchange", 2): _worker0_shard,
    ("optimisers-compared", 1): _runs_queued,
    ("optimisers-compared", 3): _variants,
    ("fidelity", 2): _preset_batch_runs,
    ("the-claims", 1): _claims,
}

QUESTIONS = [(x.id, i + 1) for x in LESSONS for i in sorted(x.questions)]
#: Questions whose answer takes seconds of arithmetic (no process): out of the fast loop.
SLOW_QUESTIONS = {("cholesky", 2), ("cholesky", 4)}


@pytest.mark.parametrize("lesson_id, step", [
    pytest.param(a, b, id=f"{a}-step{b}", marks=[pytest.mark.slow] if (a, b) in SLOW_QUESTIONS else [])
    for a, b in QUESTIONS])
def test_the_answer_is_what_the_page_shows(lesson_id, step):
    lesson = BY_ID[lesson_id]
    q = lesson.questions[step - 1]
    assert (lesson_id, step) in ANSWERS, "a new question needs its recomputation here"
    got = ANSWERS[(lesson_id, step)](lesson)
    if q.kind == "choice":
        assert q.answer in q.choices
        assert got in q.choices, (got, q.choices)  # the page's answer is one the student can pick
        assert q.answer == got, (q.answer, got)
        return
    if isinstance(got, tuple):  # a time: its unit is the one the page picks for it
        got, unit = got
        assert q.unit == unit, (q.unit, unit)
    assert q.check(got), f"{lesson_id} step {step}: the page shows {got!r}, the lesson expects {q.answer!r} " \
                         f"within {q.tolerance:.1%}"


def test_every_recomputation_belongs_to_a_question():
    assert set(ANSWERS) == set(QUESTIONS), set(ANSWERS) ^ set(QUESTIONS)


def test_every_lesson_asks_at_least_one_question():
    for lesson in LESSONS:
        assert lesson.questions, lesson.id


def test_the_course_covers_every_page_and_every_claim():
    assert len(LESSONS) >= 12
    pages = {x.page for x in LESSONS}
    # Home lists the lessons and the Class page is where the teacher hands them out: neither teaches a topic
    missing = [f for f, title, _ in PAGES if title not in ("Home", "Class") and f not in pages]
    assert not missing, missing
    claims = about_claims()
    named = {x.claim for x in LESSONS if x.claim}
    assert named <= set(claims), named - set(claims)  # a lesson's claim is quoted verbatim
    assert not set(claims) - named, set(claims) - named


def test_hidden_controls_are_ones_their_page_can_hide():
    for lesson in LESSONS:
        page = Path(lesson.page).stem
        for key in lesson.hide:
            assert key in HIDEABLE and state.VIEW[key].page == page, (lesson.id, key)


def test_every_lesson_text_is_there_and_its_view_belongs_to_its_page():
    for lesson in LESSONS:
        assert lesson.text(FOLDER).strip(), lesson.id
        page = Path(lesson.page).stem
        assert all(state.control_for(k).page == page for k in lesson.view), lesson.id
        sc = lesson.scenario(FOLDER)
        for name in [*lesson.view.get("ar_devices", ()), lesson.view.get("topo_from"), lesson.view.get("topo_to")]:
            assert name is None or name in sc.topology.device_names, (lesson.id, name)
