"""The About page's measured sentences for the placement claims, from a run store holding finished runs: only
runs of one emulated cluster are compared, each strategy by its newest run, and a claim nobody measured says how
to measure it."""
from __future__ import annotations

import math

from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.store.runs import JOB_WORKER, RunStore
from lab.view.about import placement_evidence
from lab.view.placement import balance_outcome

BATCH = 32


def add(store: RunStore, strategy: str, step_s: float, *, slowdown=None, balance="off", rounds=None,
        status="done", model="cnn") -> str:
    tr = Training(model=model, parallel="placement", strategy=strategy, batch_size=BATCH, emulate=True,
                  slowdown=slowdown or {}, balance=balance)
    rid = store.create_run(Scenario("s", preset("cxl"), tr), status=status)
    if rounds is not None:
        store.merge_info(rid, {"balance": {"rounds": [{"round_time": t} for t in rounds], "converged": True,
                                           "done": True}})
    else:  # 2 warm-up steps, then the measured ones around step_s (median step_s)
        times = [9.0, 9.0, step_s * 0.9, step_s, step_s * 1.1]
        store.add_metric_rows(rid, [(k + 1, JOB_WORKER, 1.0, math.nan, 0, 0, *([math.nan] * 6), BATCH / t, 0.0)
                                    for k, t in enumerate(times)])
    return rid


def test_nothing_measured_says_how_to_measure(tmp_path):
    ev = placement_evidence(RunStore(tmp_path / "runs.db"))
    assert "Run every strategy" in ev["type_rule"] and "Run the balancing loop" in ev["balancing"]


def test_the_type_rule_is_ranked_among_strategies_of_its_own_cluster_only(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    add(store, "even_split", 0.001)  # another cluster (no slowdown): not compared
    add(store, "even_split", 0.080, slowdown={"gpu": 20.0})
    add(store, "greedy_eft", 0.050, slowdown={"gpu": 20.0})
    add(store, "type_rule", 0.099, slowdown={"gpu": 20.0})
    add(store, "greedy_eft", 0.500, slowdown={"gpu": 20.0}, status="failed")  # not finished: not read
    ev = placement_evidence(store)["type_rule"]
    assert ev.startswith("Measured (LeNet-style CNN on “cxl”, emulated (gpu 20× slower)): the type rule's step 99 ms, "
                         "3 of 3 strategies; greedy EFT 50 ms, even split 80 ms."), ev


def test_the_balancing_loop_is_set_against_the_even_split_of_its_cluster(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    split = add(store, "even_split", 0.080, slowdown={"gpu": 20.0})
    loop = add(store, "greedy_eft", 0.0, slowdown={"gpu": 20.0}, balance="throughput", rounds=[0.3, 0.06, 0.058])
    ev = placement_evidence(store)["balancing"]
    assert "settled after 3 rounds, its last round's step 58 ms against 80 ms for the even layer split (-28%)" in ev
    rows = {r["key"]: r for r in balance_outcome(store, [loop, split])}
    assert rows["throughput"]["step"] == 0.058 and rows["even_split"]["vs_split"] == 0.0
    assert rows["throughput"]["vs_split"] == 0.058 / 0.080 - 1


def test_the_page_model_gives_every_design_its_claims_and_the_runs_measured_sentence(tmp_path):
    from lab.view import about

    store = RunStore(tmp_path / "runs.db")
    add(store, "type_rule", 0.03)
    add(store, "heft", 0.02)
    designs = about.page(store)
    assert [d.title for d in designs] == [t for t, _, _ in about.DESIGNS] and len(designs) == 4
    claims = [c for d in designs for c in d.claims]
    assert len(claims) == sum(len(cs) for _, _, cs in about.DESIGNS)
    measured = {c.claim: c.measured for c in claims if c.measured is not None}
    assert len(measured) == 2  # the two placement claims, and only they
    typed = next(v for k, v in measured.items() if "by device type" in k)
    assert typed == placement_evidence(store)["type_rule"] and "Run every strategy" not in typed
    assert all(c.page.startswith("pages/") for c in claims)
