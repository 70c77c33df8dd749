"""lab.view.placement: the Placement page's pins, balancing defaults and runs, and its sentences."""

from __future__ import annotations

from lab.modelled.balance import RULES
from lab.modelled.placement import TaskGraph
from lab.scenario.catalogue import preset
from lab.view import placement as pv


def _esc(text: str) -> str:  # a stand-in for the page's markdown escape, to see where it is applied
    return f"<{text}>"


def test_changed_pins_pin_unpin_and_clear():
    pins = {"conv1": "host"}
    assert pv.changed_pins(pins, "pin", "fc", "gpu") == {"conv1": "host", "fc": "gpu"}
    assert pv.changed_pins(pins, "pin", "conv1", "fpga") == {"conv1": "fpga"}
    assert pv.changed_pins(pins, "unpin", "conv1", "gpu") == {}
    assert pv.changed_pins(pins, "unpin", "fc", "gpu") == {"conv1": "host"}
    assert pv.changed_pins(pins, "clear", "fc", "gpu") == {}
    assert pins == {"conv1": "host"}  # the argument is not changed
    assert pv.changed_pins((("a", "x"),), "pin", "b", "y") == {"a": "x", "b": "y"}  # the scenario's tuple form


def test_topology_and_pins_lines():
    topo = pv.topology(preset("pcie"))  # its names are values, which the page shows as text
    assert topo.caption.format(**topo.values) == (
        "Topology **pcie**: host (cpu), gpu (gpu), fpga (fpga), asic (asic), dpu (dpu). Change it on the Topology "
        "page.")
    assert topo.caption.format(**{k: _esc(x) for k, x in topo.values.items()}) == (
        "Topology **<pcie>**: <host (cpu), gpu (gpu), fpga (fpga), asic (asic), dpu (dpu)>. Change it on the "
        "Topology page.")
    assert pv.pins_line({}) == ("**Pinned:** nothing: the strategy places every operator. Pins are part of the "
                                "scenario (saved with it and carried by the page link).")
    assert pv.pins_line({"conv1": "host", "fc": "gpu"}, _esc) == (
        "**Pinned:** <conv1> → <host>, <fc> → <gpu>. Pins are part of the scenario (saved with it and carried by the "
        "page link).")


def test_default_slowdowns_slow_the_fastest_matmul_device_20x():
    fastest, slow = pv.default_slowdowns(preset("pcie"))
    assert fastest == "gpu"
    assert slow == {"host": 1.0, "gpu": 20.0, "fpga": 1.0, "asic": 1.0, "dpu": 1.0}


def test_knobs_modes_intro_and_captions():
    assert list(pv.BALANCE_KNOBS) == ["pl_noise", "pl_seed", "pl_tol", "pl_patience", "pl_rounds"]
    from lab.view.state import VIEW

    seed, rounds = VIEW["pl_seed"].setting, VIEW["pl_rounds"].setting  # the knobs' widgets come from the view table
    assert (seed.label, seed.min, seed.max, seed.step) == ("seed", 0, 2**31 - 1, 1)
    assert (rounds.label, rounds.min, rounds.max, rounds.step) == ("max rounds", 1, 500, 1)
    assert list(pv.BALANCE_MODES) == ["model", "data"]
    intro = pv.balance_intro()
    assert ("Both update rules run side by side: **wait** = shift by waiting time; **throughput** = proportional "
            "to measured speed. A stable plan") in intro
    assert intro.startswith("Every node starts with an equal weight.") and intro.endswith("(the green line).")
    assert pv.rounds_caption("data") == ("weights: batch shares; imbalance = (max wait − mean wait) / round time "
                                         "(dimensionless).")
    assert pv.rounds_caption("model").startswith("weights: the planner speed factor per device; imbalance")
    assert pv.data_nodes_line({"host": 1.0, "gpu": 0.1}, 64, _esc) == (
        "Data-parallel nodes: the devices that can run the whole model (<host, gpu>); the global batch of 64 "
        "samples is split between them.")


def test_run_balancing_model_parallel():
    g = TaskGraph({t: {"p": 1.0, "q": 1.0} for t in "abcd"})
    res = pv.run_balancing(g, None, 0, {"p": 1.0, "q": 3.0}, noise=0.0, seed=0, tolerance=0.05, patience=2,
                           max_rounds=50)
    assert list(res) == list(RULES)
    for r in RULES:
        assert res[r].mode == "model" and res[r].rule == r and res[r].nodes == ("p", "q")
        assert res[r].converged and len(res[r].rounds) == 4
        assert res[r].final.round_time == 3.0 == res[r].reference["round_time"]  # q is 3x slower: 3 ops on p
    assert sorted(res["throughput"].final.plan) == ["p", "p", "p", "q"]


def test_run_balancing_data_parallel_uses_only_the_nodes_slowdowns():
    res = pv.run_balancing(None, {"x": 1.0, "y": 1.0}, 12, {"x": 1.0, "y": 2.0, "z": 5.0}, noise=0.0, seed=0,
                           tolerance=0.05, patience=2, max_rounds=50)
    for r in RULES:
        assert res[r].mode == "data" and res[r].nodes == ("x", "y")
        assert res[r].final.plan == (8, 4) and res[r].final.round_time == 8.0  # y at half speed gets a third
        assert res[r].reference["plan"] == (8, 4)


def test_balance_summary():
    res = pv.run_balancing(None, {"x": 1.0, "y": 1.0}, 12, {"x": 1.0, "y": 2.0}, noise=0.0, seed=0,
                           tolerance=0.05, patience=2, max_rounds=50)
    assert pv.balance_summary("wait", res["wait"], "data", 8.0, 1e3, "ms", _esc) == (
        "**wait** (shift by waiting time): stopped after 4 rounds (<the plan has not changed for 2 round(s)>); last "
        "round 8000 ms vs 8000 ms for the split made with the true speeds")
    short = pv.run_balancing(None, {"x": 1.0, "y": 1.0}, 12, {"x": 1.0, "y": 2.0}, noise=0.0, seed=0,
                             tolerance=0.05, patience=2, max_rounds=2)
    text = pv.balance_summary("throughput", short["throughput"], "model", 4.0, 1.0, "s")
    assert text.startswith("**throughput** (proportional to measured speed): did not stop after 2 rounds (")
    assert text.endswith("vs 4 s for the plan made with the true speeds")


def test_a_kept_plan_round_trips_through_the_link_and_a_damaged_one_is_refused():
    import json

    import pytest

    from lab.errors import LabError
    from lab.modelled.placement import TaskGraph, compare_plans, plan_record, run_strategy
    from lab.modelled.opgraph import trace
    from lab.scenario.catalogue import preset
    from lab.view.placement import baseline_from_json, baseline_json

    topo = preset("cxl")
    g = TaskGraph.from_model(trace("mlp", 32), topo)
    rec = plan_record("mlp", 32, "greedy_eft", {"fc1": "gpu"}, run_strategy("greedy_eft", g), topo, "datasheet")
    back = baseline_from_json(baseline_json(rec))
    assert back == json.loads(json.dumps(rec))
    assert compare_plans(back, rec)[0] == "same settings: makespan +0.0 %"
    # the same plan on a topology whose one link is slower: the link is named, and a change of 0 is exactly 0
    d = topo.to_dict()
    d["links"][1] = dict(d["links"][1], kind="pcie", bandwidth=32e9)
    other = dict(rec, topology=d)
    summary, rows = compare_plans(other, rec)
    a, b = sorted((d["links"][1]["a"], d["links"][1]["b"]))
    assert summary.startswith(f"link {a}–{b}: pcie 32 GB/s → cxl 64 GB/s: makespan "), summary
    assert all(r["change"] == 0.0 or abs(r["change"]) > 1e-12 for r in rows)
    assert baseline_from_json("") is None
    for bad in ("[1]", json.dumps(dict(rec, model="gpt")), json.dumps(dict(rec, batch=True)),
                json.dumps(dict(rec, makespan=float("inf"))), json.dumps(dict(rec, busy={"\u202egpu": 1.0})),
                json.dumps(dict(rec, topology={"devices": []})), '{"model": ' * 40):
        with pytest.raises(LabError):
            baseline_from_json(bad)


def test_kept_runs_drop_the_deleted_and_say_whether_any_is_active(tmp_path):
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    store = RunStore(tmp_path / "runs.db")
    done = store.create_run(default_scenario(), status="done")
    queued = store.create_run(default_scenario(), status="queued")
    assert pv.kept_runs(store, (done, "20990101-000000-abcdef")) == ([done], False)
    assert pv.kept_runs(store, (done, queued)) == ([done, queued], True)
    assert pv.kept_runs(store, None) == ([], False)
    assert pv.balance_run_panels(store, [done], {}, str) == []  # a plan that does not balance has no panel


def test_what_the_page_shows_of_a_plan_its_baseline_and_the_operator_explained():
    from lab.modelled import placement as pl
    from lab.modelled.opgraph import trace

    topo = preset("cxl")
    g = TaskGraph.from_model(trace("mlp", 32), topo).with_pins({"net_0": "gpu"})
    shown, note, s, transfers, reasons = pv.placed("greedy_eft", g)
    assert s.assignment == pl.run_strategy("greedy_eft", shown).assignment and s.assignment["net_0"] == "gpu"
    assert set(reasons) == set(s.assignment) and transfers == pl.transfer_rows(shown, s)
    rec = pl.plan_record("mlp", 32, "greedy_eft", {"net_0": "gpu"}, s, topo, "datasheet")
    summary, rows, dropped = pv.against_baseline(pv.baseline_json(rec), rec)
    assert summary == "same settings: makespan +0.0 %" and rows and dropped is None
    assert pv.against_baseline("", rec) == ("", None, None)
    summary, rows, dropped = pv.against_baseline("[1]", rec)
    assert rows is None and dropped.startswith("The baseline in the link was dropped: ")
    cols = pv.baseline_columns(["device", "baseline (ms)", "now (ms)", "change (ms)"])
    assert set(cols) == {"baseline (ms)", "now (ms)", "change (ms)", "change (%)"}
    assert cols["change (%)"]["format"] == "%+.1f"
    assert pv.explained(["a", "b"], "b") == ("b", None)
    assert pv.explained(["a", "b"], "z") == ("a", "The operator explained is now a (z is not in this graph).")
    assert pv.explained(["a", "b"], "") == ("a", None)


def test_the_page_says_where_the_other_cost_models_plan_differs():
    import dataclasses

    from lab.machine.calibrate import synthetic_profile
    from lab.machine.profile import ExecutorFit
    from lab.modelled import placement as pl_
    from lab.modelled.costmodel import DATASHEET
    from lab.modelled.opgraph import trace
    from lab.scenario.catalogue import preset as preset_

    og, topo = trace("cnn", 32, 64), preset_("cxl")
    free = dataclasses.replace(synthetic_profile(), executor=ExecutorFit())
    dear = dataclasses.replace(synthetic_profile(), executor=ExecutorFit(send_fixed=2e-3, recv_fixed=2e-3))
    g = pl_.TaskGraph.from_model(og, topo, model=DATASHEET)
    _, _, s, _, _ = pv.placed("greedy_eft", g)
    # The catalogue puts the CNN on its GPU alone; with messages free this machine's costs spread it out.
    line = pv.other_plan_line("greedy_eft", og, topo, {}, s.assignment, "datasheet", free)
    assert line.startswith("On this machine") and "elsewhere" in line
    assert pv.other_plan_line("greedy_eft", og, topo, {}, s.assignment, "datasheet", dear).endswith("same plan.")
    assert pv.other_plan_line("greedy_eft", og, topo, {}, s.assignment, "datasheet", None) is None


def test_the_why_caption_says_where_its_numbers_come_from():
    import dataclasses

    from lab.machine.calibrate import synthetic_profile
    from lab.machine.calibrated_model import CalibratedModel
    from lab.machine.profile import ExecutorFit
    from lab.modelled.costmodel import DATASHEET

    assert "catalogue's numbers (datasheet)" in pv.why_caption(DATASHEET)
    measured = CalibratedModel(dataclasses.replace(synthetic_profile(), executor=ExecutorFit()))
    assert "executor's messages on this machine" in pv.why_caption(measured)
    assert "no measurement of the executor's messages" in pv.why_caption(CalibratedModel(synthetic_profile()))


def test_the_balancing_loop_starts_from_the_pages_plan_and_every_run_of_it_checks():
    """The loop's first round is the plan the page's cost model makes (the calibrated one when chosen), not the
    datasheet's; the run's own checks accept it."""
    import dataclasses

    from lab.machine.calibrate import synthetic_profile
    from lab.machine.calibrated_model import CalibratedModel
    from lab.machine.profile import ExecutorFit
    from lab.modelled.costmodel import DATASHEET
    from lab.modelled.opgraph import trace
    from lab.scenario.document import Scenario
    from lab.train import placement_run

    og, topo = trace("cnn", 32, 64), preset("cxl")
    cm = CalibratedModel(dataclasses.replace(synthetic_profile(), executor=ExecutorFit()))
    sheet, here = (TaskGraph.from_model(og, topo, model=m) for m in (DATASHEET, cm))
    planned = {name: pv.assignment_of(g, "heft") for name, g in (("sheet", sheet), ("here", here))}
    assert planned["sheet"] != planned["here"]
    sc = Scenario("balance", topo)
    items = pv.balance_items(sc, here, "cnn", 32, 2, 3, 4, 0.05, 2, {}, "heft")
    loops = [s for s, name in items if name.startswith("balancing")]
    assert len(loops) == len(RULES)
    for s in loops:
        assert dict(s.training.placement) == planned["here"] and s.training.strategy == "heft"
        assert placement_run.check_placement(s).assignment == planned["here"]
    default = pv.balance_scenario(sc, "cnn", 32, 2, "wait", 3, 4, 0.05, 2, {}, "greedy_eft")
    assert dict(default.training.placement) == {}


def test_the_runs_shown_without_runs_say_how_to_get_them(tmp_path):
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    store = RunStore(tmp_path / "runs.db")
    none = pv.PlanRuns(store, ("20990101-000000-abcdef",), "me")  # a run deleted since the link was made
    assert (none.ids, none.active) == ([], False)
    assert [(s.key, s.caption) for s in none.ranking()] == [("pl_runs_none", pv.NO_PLAN_RUNS)]
    assert [(s.key, s.caption) for s in pv.BalanceRuns(store, None, None).sections()] == [
        ("pl_bal_none", pv.NO_BALANCE_RUNS)]
    queued = store.create_run(default_scenario(), status="queued", name="mine")
    one = pv.PlanRuns(store, (queued,), "me")
    assert (one.ids, one.active, one.ranking()) == ([queued], True, [])  # one run: nothing to rank
    assert one.labeller()(queued).startswith("mine · ")
    bal = pv.BalanceRuns(store, (queued,), {})
    sections = bal.sections(_esc, lambda kind: f"[{kind}]")  # a plan that does not balance has no panel
    assert bal.active and [s.key for s in sections] == ["pl_bal_outcome", "pl_bal_rounds_caption"]
    assert sections[0].chart_input == {"rows": []} and sections[1].kind == "measured"


def test_an_uploaded_network_joins_the_model_box_once_and_a_broken_file_says_why(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from lab.view.placement import upload
    from tests.scenario.test_onnx_models import exported

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    blob = exported("mlp")[1]
    session: dict = {}
    name = upload.take(session, SimpleNamespace(file_id="a", name="mine.onnx", getvalue=lambda: blob))
    assert name is not None and name in upload.options() and upload.label(name).startswith("mine.onnx (ONNX")
    done = upload.notes(session)[0].notices[0]
    assert done.level == "success" and "fed the lab's 64 values a sample, reshaped" in done.text, done.text
    assert upload.take(session, SimpleNamespace(file_id="a", name="mine.onnx", getvalue=lambda: blob)) is None  # seen
    bad = SimpleNamespace(file_id="b", name="<b>x</b>.onnx", getvalue=lambda: blob[:100])
    assert upload.take(session, bad) is None
    note = upload.notes(session)[0].notices[0]
    assert note.level == "error" and "<b>x</b>.onnx" in note.text and "unchanged" in note.text
    assert upload.take(session, None) is None and upload.notes(session) == []  # the file was removed
    unheld = "onnx-0123456789ab"
    assert unheld in upload.options(unheld) and "does not hold" in upload.label(unheld)
    assert unheld not in upload.options() and upload.control_options("pl_batch") == {}


def test_a_failed_run_says_its_reason_in_one_line(tmp_path, monkeypatch):
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    store = RunStore(tmp_path / "runs.db")
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(parallel="placement"))
    rid = store.create_run(sc, status="running")
    # what a rank records of a library's error: its first line (torch.fx's trace and links follow it)
    store.set_status(rid, "failed", error="worker 1 failed at step 1: RuntimeError: The function 'native_batch_norm' "
                                          "is not differentiable\n\nWhile executing %bn\nUse tlparse to see")
    sections = pv.PlanRuns(store, (rid,), "me").drawn(rid)
    run = dict(sections[0].metrics)["Run"]
    notice = sections[-1].notices[0].text
    for text in (run, notice):
        assert "failed" in text and "native_batch_norm' is not differentiable" in text, text
        assert "\n" not in text and "tlparse" not in text and "While executing" not in text
    queued = store.create_run(sc, status="queued")
    assert pv.PlanRuns(store, (queued,), "me").drawn(queued)[-1].notices[0].text.endswith("when it ends.")


def test_the_memory_table_sets_each_device_beside_its_model_and_the_other_schedules():
    from lab.view.placement import plans

    out = {"schedule": "1f1b", "memory": [
        {"device": "fpga0", "measured": 3 * 2**20, "modelled": 2 * 2**20, "error": 0.5},
        {"device": "<b>gpu</b>", "measured": None, "modelled": 2**20, "error": None}],
        "memory_by_schedule": {"gpipe": {"fpga0": 4 * 2**20, "<b>gpu</b>": 4 * 2**20}, "1f1b": None}}
    rows = plans.memory_table(out)
    assert rows[0] == {"device": "fpga0", "measured (MB)": "3.146", "modelled (MB)": "2.097", "measured / modelled − 1": "+50.0%",
                       "modelled under GPipe (MB)": "4.194"}
    assert rows[1]["device"] == "<b>gpu</b>" and rows[1]["measured (MB)"] == "—"  # a cell, shown as text
    assert plans.peak_pair(out["memory"]) == "3.15 MB / 2.1 MB"
    assert plans.peak_pair([]) == "—"
    out["memory_by_schedule"]["gpipe"] = None  # a schedule the plan cannot run has no column value
    assert plans.memory_table(out)[0]["modelled under GPipe (MB)"] == "—"


def test_every_strategy_under_1f1b_runs_the_plans_1f1b_can_run_and_no_other():
    from lab.errors import LabError
    from lab.modelled.opgraph import trace
    from lab.scenario.document import Scenario, Training
    from lab.scenario.models import build_model
    from lab.train import placement_run
    from lab.view.placement import plans

    topo = preset("cxl")
    g = TaskGraph.from_model(trace(build_model("cnn", 64, 10), 32, 64), topo).with_pins({"conv1": "fpga"})
    base = Scenario("s", topo, Training(model="cnn", pins=(("conv1", "fpga"),), schedule="1f1b"))
    got = plans.strategy_scenarios(base, g, "cnn", 32, 4, 5, False, 1)
    ran = {sc.training.strategy for sc, _ in got}
    refused = set()
    for name in plans.STRATEGY_NAMES:  # the reference: what the run itself refuses before any process starts
        sc = plans.plan_scenario(base, "cnn", 32, name, plans.assignment_of(g, name), 4, 5, False)
        try:
            placement_run.check_placement(sc)
        except LabError:
            refused.add(name)
    assert refused and ran == set(plans.STRATEGY_NAMES) - refused
    assert all(sc.training.schedule == "1f1b" for sc, _ in got)
    gpipe = plans.strategy_scenarios(base.replace(training=base.training.replace(schedule="gpipe")), g, "cnn", 32, 4, 5,
                                 False, 1)
    assert {sc.training.strategy for sc, _ in gpipe} == set(plans.STRATEGY_NAMES)  # GPipe runs every plan


def test_a_balancing_run_says_how_many_re_made_plans_its_schedule_did_not_take_and_why():
    rounds = [{"round_time": 0.010, "changes": 3, "kept": None},
              {"round_time": 0.008, "changes": 0, "kept": "1F1B runs one piece per device"},
              {"round_time": 0.008, "changes": 0, "kept": "1F1B runs one piece per device"}]
    run = {"scenario": {"training": {"balance": "wait"}}, "status": "done",
           "info": {"balance": {"rounds": rounds, "done": True, "converged": False, "reason": "the last round"}}}
    line = pv.balance_run_line(run)
    assert line.endswith("2 re-made plan(s) were not taken, as the schedule cannot run them (1F1B runs one piece "
                         "per device).")
    assert "3 round(s), 3 operator move(s)" in line
    taken = {**run, "info": {"balance": {**run["info"]["balance"], "rounds": [dict(r, kept=None) for r in rounds]}}}
    assert "not taken" not in pv.balance_run_line(taken)


def test_a_balancing_loop_whose_start_the_schedule_cannot_run_is_refused_with_what_to_change():
    import pytest

    from lab.errors import LabError
    from lab.modelled.opgraph import trace
    from lab.scenario.document import Scenario

    og, topo = trace("cnn", 32, 64), preset("cxl")
    g = TaskGraph.from_model(og, topo)
    order = g.topological_order()
    looped = {t: ("gpu" if i % 2 else "host") for i, t in enumerate(order)}  # returns to a device: not 1F1B's
    sc = Scenario("balance", topo)
    sc = sc.replace(training=sc.training.replace(schedule="1f1b"))
    with pytest.raises(LabError, match="the balancing loop starts from the plan of .*, which the 1F1B schedule "
                                       "cannot run.*choose GPipe"):
        pv.balance_items(sc, g, "cnn", 32, 2, 3, 4, 0.05, 2, {}, "greedy_eft", plan=lambda graph, name: looped)
    gpipe = sc.replace(training=sc.training.replace(schedule="gpipe"))
    items = pv.balance_items(gpipe, g, "cnn", 32, 2, 3, 4, 0.05, 2, {}, "greedy_eft", plan=lambda graph, name: looped)
    assert [name for _, name in items if name.startswith("balancing")]  # GPipe runs the same start
