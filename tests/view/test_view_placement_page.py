"""lab.view.placement.page: the Placement page's model, built from a scenario and the page's controls (real traces,
plans and simulated balancing loops; no page, no process)."""
from __future__ import annotations

import pandas as pd
import pytest

from lab.errors import LabError
from lab.figures import placement as figs
from lab.machine.calibrate import synthetic_profile
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, default_scenario
from lab.scenario.names import STRATEGY_LABELS, STRATEGY_NAMES
from lab.scenario.topology import Device, Link, Switch, Topology
from lab.train import placement_run
from lab.view import placement as view
from lab.view.state import VIEW
from tests.view.sections import by_key, figure_json



@pytest.fixture(autouse=True)
def no_profile(tmp_path, monkeypatch):
    """No machine profile unless a test saves one (the datasheet needs none)."""
    monkeypatch.setenv("LAB_DATA", str(tmp_path))


def page(sc: Scenario | None = None, **values) -> view.PlacementView:
    v = {k: VIEW[k].setting.default for k in (*view.PLAN_CONTROLS, "pl_cost")} | values
    return view.PlacementView.build(sc or default_scenario(), v)


def knobs(pv: view.PlacementView, **values) -> dict:
    """The balancing controls at their defaults (each device's slowdown as the page starts it), then ``values``."""
    return {"pl_bal_mode": "model", **pv.slowdowns, **{k: VIEW[k].setting.default for k in view.BALANCE_KNOBS}} | values


def table(section) -> pd.DataFrame:
    return pd.DataFrame(section.table)


def on(topology: Topology) -> Scenario:
    return Scenario(name="t", topology=topology)


def every_section(pv: view.PlacementView) -> dict:
    """Every section of the plan, built as the page builds it (each figure too)."""
    sections = [*pv.plan(), *pv.why(pv.tasks[0]), *pv.against_baseline(pv.baseline)[0], *pv.assignment(),
                pv.comparison(), *pv.balancing(knobs(pv)).sections()]
    for s in sections:
        if s.chart:
            figure_json(s)
    return by_key(sections)


def test_the_default_plan_its_assignment_comparison_and_balancing():
    pv = page()
    s = every_section(pv)
    assignment = table(s["pl_assign"])
    assert list(assignment["operator"]) == ["net_0", "net_1", "net_2", "net_3", "net_4"]
    assert {"class", "FLOPs", "device"} <= set(assignment.columns)
    assert any(c.startswith("start (") for c in assignment) and any(c.startswith("on fpga (") for c in assignment)
    assert assignment["FLOPs"].iloc[0] == 2 * 32 * 64 * 128
    assert s["pl_assign"].header == "Assignment" and s["pl_assign"].kind == "modelled"
    compare = table(s["pl_compare"])
    assert len(compare) == len(STRATEGY_NAMES) and s["pl_compare"].header == "All strategies on this scenario"
    opt = compare[compare.strategy == STRATEGY_LABELS["optimal"]].iloc[0]  # named as the Strategy menu names it
    assert opt["above optimum (%)"] == 0
    assert (compare["above optimum (%)"].dropna() >= -1e-9).all()
    assert compare[compare.strategy == STRATEGY_LABELS["type_rule"]]["above optimum (%)"].iloc[0] > 100
    lines = " ".join(x.text for k, x in s.items() if k.startswith("pl_bal_line_"))
    assert "**wait**" in lines and "**throughput**" in lines and "stopped after" in lines
    assert lines.count(":blue-badge") == 0 and lines.endswith(" modelled.")  # the badge the page gives (str here)
    assert all(x.kind == "modelled" for x in s.values() if x.caption and (x.chart or x.table is not None))
    assert s["pl_plan"].metrics[0][0].startswith("Makespan (")
    assert [label for label, _ in s["pl_plan"].metrics[1:]] == ["Operators", "Devices used",
                                                                 "Transfers between devices"]
    gantt = figure_json(s["pl_gantt"])
    assert gantt["layout"]["title"]["text"] == f"{STRATEGY_LABELS['greedy_eft']}: one forward pass"
    assert s["pl_gantt"].caption == view.tables.gantt_caption()


def test_type_rule_on_the_cnn_uses_fpga_and_asic():
    pv = page(pl_model="cnn", pl_strategy="type_rule")
    by_class = dict(zip(*(table(pv.assignment()[0])[c] for c in ("class", "device"))))
    assert by_class["conv"] == "fpga" and by_class["elementwise"] == "asic" and by_class["matmul"] == "gpu"


def test_optimal_on_a_big_model_runs_on_a_coarsened_graph():
    pv = page(pl_model="resnet", pl_strategy="optimal")
    plan = by_key(pv.plan())
    assert any("coarsened graph" in n.text and n.level == "info" for n in plan["pl_plan"].notices)
    compare = pv.comparison()
    graphs = set(table(compare)["graph"])
    assert any(g.startswith("full graph (26") for g in graphs) and any(g.startswith("coarsened") for g in graphs)
    full = table(compare)[table(compare).graph.str.startswith("full")]
    assert "optimal" not in set(full.strategy)
    assert "coarsened graph" in compare.intro


def test_data_parallel_balancing_and_slowdowns():
    pv = page()
    assert pv.slowdowns == {"pl_slow_host": 1.0, "pl_slow_gpu": 20.0, "pl_slow_fpga": 1.0, "pl_slow_asic": 1.0,
                            "pl_slow_dpu": 1.0}  # the fastest matmul device starts 20x slow
    assert pv.slowdown_note().values == {"fastest": "gpu"}
    loop = pv.balancing(knobs(pv, pl_bal_mode="data"))
    head = by_key(loop.sections())
    assert "split made with the true speeds" in head["pl_bal_line_0"].text
    assert head["pl_bal_nodes"].caption.startswith("Data-parallel nodes")
    assert head["pl_bal_nodes"].values == {"nodes": "host, gpu", "batch": 32}
    assert loop.tabs == ["rounds: wait", "rounds: throughput"]
    rounds = table(loop.rounds[0])
    assert {"w host", "w gpu"} == {c for c in rounds.columns if c.startswith("w ")}
    assert rounds["samples moved"].iloc[1] > 0  # the 20x slower GPU loses samples after round 1
    assert loop.tail.caption.startswith("weights: batch shares") and pv.balance_results is None  # no model mode yet
    rounds = table(pv.balancing(knobs(pv, pl_bal_mode="data", pl_slow_gpu=1.0, pl_noise=0.0)).rounds[0])
    assert rounds["w gpu"].iloc[-1] > rounds["w host"].iloc[-1]  # at catalogue speed the GPU is the faster node
    pv.balancing(knobs(pv))
    assert set(pv.balance_results) == {"wait", "throughput"}  # what the balancing runs are drawn beside


def test_a_model_without_a_kernel_anywhere_is_a_clear_message():
    only_conv = Topology("convs", (Device("f0", "fpga", throughput={"conv": 1e12}),
                                   Device("f1", "fpga", throughput={"conv": 1e12})),
                         (Link("f0", "f1", "pcie", 32e9),))
    pv = page(on(only_conv))
    assert not pv.placeable and pv.operators == ["net_0", "net_1", "net_2", "net_3", "net_4"]
    with pytest.raises(LabError, match="'matmul' kernel"):
        pv.plan()
    assert pv.comparison().table is None  # the plan says why, once


def test_an_over_full_device_is_flagged():
    devs = (Device("tiny", "gpu", memory=1000.0, throughput={"matmul": 1e12, "elementwise": 1e11}),)
    s = by_key(page(on(Topology("tiny", devs, ()))).assignment())
    assert [(n.level, n.text) for n in s["pl_over"].notices] == [
        ("warning", "Over-full: tiny hold more than their memory.")]


def test_data_mode_without_a_whole_model_device_is_a_clear_message():
    sw = Switch("s")
    devs = (Device("g", "gpu", throughput={"matmul": 1e13}), Device("a", "asic", throughput={"elementwise": 1e12}))
    pv = page(on(Topology("split", devs, (Link("g", "s", "cxl", 64e9), Link("a", "s", "cxl", 64e9)), (sw,))))
    every_section(pv)  # model-parallel placement works: each op has some device
    with pytest.raises(LabError, match="can run the whole model"):
        pv.balancing(knobs(pv, pl_bal_mode="data"))


@pytest.mark.parametrize("name", ["pcie", "two-pools", "gpu-npu", "edge"])
def test_every_preset_draws_every_section(name):
    s = every_section(page(on(preset(name))))
    assert len(s["pl_compare"].table) == len(STRATEGY_NAMES)


def test_a_pin_moves_its_operator_and_the_baseline_says_what_it_costs():
    free = page(pl_model="cnn")
    before = dict(zip(*(table(free.assignment()[0])[c] for c in ("operator", "device"))))
    assert before["conv1"] != "host"
    sections, dropped = free.against_baseline(free.baseline)
    assert sections[0].values == {"summary": "same settings: makespan +0.0 %"} and dropped is None
    pinned = page(default_scenario().replace(training=default_scenario().training.replace(pins=(("conv1", "host"),))),
                  pl_model="cnn")
    assignment = table(pinned.assignment()[0])
    row = assignment[assignment.operator == "conv1"].iloc[0]
    assert row["device"] == "host" and row["why here"].startswith("pinned")
    assert pinned.pinned().values == {"pins": "conv1 → host"} and not pinned.pinned().notices
    sections, _ = pinned.against_baseline(free.baseline, lambda kind: f"[{kind}]")
    summary, base = sections
    assert summary.text == "**{summary}** [modelled]"
    assert summary.values["summary"].startswith("conv1 pinned to host: makespan +")
    span = table(base)[table(base).device == "makespan"].iloc[0]
    assert span["change (%)"] > 0
    pct = float(summary.values["summary"].split("conv1 pinned to host: makespan ")[1].split(" %")[0])
    assert abs(pct - span["change (%)"]) < 0.051  # the summary and the table agree
    assert base.columns["change (%)"]["format"] == "%+.1f" and base.caption == view.BASELINE_CAPTION
    sections, dropped = free.against_baseline("")
    assert [x.key for x in sections] == ["pl_base_none"] and sections[0].caption == view.NO_BASELINE
    sections, dropped = free.against_baseline("[1]")
    assert [x.key for x in sections] == ["pl_base_none"] and dropped.startswith("The baseline in the link was dropped")
    assert view.with_pins(default_scenario(), "pin", {"pl_pin_op": "conv1", "pl_pin_dev": "host"}).training.pins == (
        ("conv1", "host"),)


def test_a_pin_the_model_refuses_is_a_notice_and_the_page_stays_whole():
    """After a calibration the page came back with the model reset to the MLP while a pin on the CNN's conv2
    stayed, and showed only the pin's error: the pin is left out of the plan with a notice, and every part of
    the page is drawn."""
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(pins=(("conv2", "gpu"), ("net_0", "host"))))
    pv = page(sc, pl_model="mlp")
    assert pv.pins == {"conv2": "gpu", "net_0": "host"} and pv.applied == {"net_0": "host"}
    pins = pv.pinned()
    assert [(n.level, n.icon) for n in pins.notices] == [("warning", ":material/push_pin:")]
    assert "operator 'conv2' is pinned to 'gpu', but this model has no operator 'conv2'" in pins.notices[0].text
    assert pins.notices[0].text.endswith("The plan below leaves this pin out.")
    assert pins.values == {"pins": "conv2 → gpu, net_0 → host"}  # the line still names every pin in the scenario
    s = every_section(pv)
    assignment = table(s["pl_assign"])
    assert assignment[assignment.operator == "net_0"].iloc[0]["device"] == "host"
    assert len(s["pl_compare"].table) == len(STRATEGY_NAMES) and "pl_balance" in s  # the strategy table and the balancing loop
    run = {k: VIEW[k].setting.default for k in (*view.RUN_CONTROLS, "pl_round_steps")}
    for items in (pv.plan_items(run), pv.strategy_items(run), pv.balance_items(run | knobs(pv))):
        assert items and all(dict(one.training.pins) == {"net_0": "host"} for one, _ in items)  # runs take the plan's
    one_f = run | {"pl_schedule": "1f1b"}  # the schedule picked runs, the balancing loop's too
    assert {one.training.schedule for one, _ in pv.plan_items(one_f) + pv.strategy_items(one_f)} == {"1f1b"}
    balancing = pv.balance_items(one_f | knobs(pv))
    assert {one.training.schedule for one, _ in balancing} == {"1f1b"}
    for one, name in balancing:  # a baseline whose plan 1F1B cannot run is left out, not refused at submit
        if name.startswith("baseline"):
            placement_run.check_placement(one)


def test_a_pin_on_a_device_without_a_kernel_is_a_notice_naming_the_class():
    sc = default_scenario()
    pv = page(sc.replace(training=sc.training.replace(pins=(("conv1", "asic"),))), pl_model="cnn")
    (notice,) = pv.pinned().notices
    assert "'conv1' cannot be pinned to 'asic'" in notice.text and "'conv'" in notice.text
    assert pv.placeable and pv.applied == {}


def test_the_why_panel_explains_the_chosen_device():
    pv = page(pl_model="cnn")
    left, right, below = pv.why("fc1")
    why = table(left)
    chosen = why[why["plan's choice"]]
    assert len(chosen) == 1
    finish = [c for c in why.columns if c.startswith("finish (")][0]
    assert chosen.iloc[0][finish] == why[finish].min()  # greedy earliest finish picks the earliest finish
    parts = [c for c in why.columns
             if c.split(" (")[0] in ("inputs exist at", "transfer", "wait for device", "compute")]
    ok = why.dropna(subset=[finish])
    assert ((ok[parts].sum(axis=1) - ok[finish]).abs() <= 1e-9 * ok[finish].abs().max()).all()
    assert left.text == "**{task}** ({cls}): {reason}." and left.values["task"] == "fc1"
    assert "earliest finish of" in left.values["reason"]
    figure_json(right)
    assert (left.key, right.key, below.kind) == ("pl_why", "pl_why_plot", "modelled")
    assert pv.explained("fc1") is None and pv.explained("gone") == (
        pv.tasks[0], f"The operator explained is now {pv.tasks[0]} (gone is not in this graph).")
    assert pv.explained("") == (pv.tasks[0], None)


def test_the_cost_model_is_chosen_and_named(tmp_path):
    datasheet = page()
    assert datasheet.cost_model().caption.startswith("Cost model: FLOPs / the device's catalogue throughput")
    with pytest.raises(LabError, match="calibrate the machine on the Fidelity page"):
        page(pl_cost="calibrated")  # no profile yet: a message that says how to get one
    synthetic_profile().save()
    calibrated = page(pl_cost="calibrated")
    assert "this machine's calibrated forward + backward cost" in calibrated.cost_model().caption
    gantt = by_key(calibrated.plan())["pl_gantt"]
    assert figure_json(gantt)["layout"]["title"]["text"].endswith("one forward + backward")
    a, b = (table(x.assignment()[0]) for x in (datasheet, calibrated))
    assert list(a["operator"]) == list(b["operator"]) and not a.equals(b)
    assert any(c.startswith("finish (") for c in a.columns)


def test_the_topology_caption_quotes_its_names_as_values():
    s = view.topology(preset("pcie"))
    assert s.caption == "Topology **{name}**: {devices}. Change it on the Topology page."
    assert s.values == {"name": "pcie", "devices": "host (cpu), gpu (gpu), fpga (fpga), asic (asic), dpu (dpu)"}


def test_the_page_names_only_placement_controls_and_the_fixed_sections():
    keys = (*view.PLAN_CONTROLS, *view.RUN_CONTROLS, *view.BALANCE_KNOBS)
    assert all(VIEW[k].page == "placement" for k in keys) and len(set(keys)) == len(keys)
    assert all(VIEW[k].advanced for k in view.BALANCE_KNOBS)  # lesson mode hides the knobs
    assert view.BALANCE_MODES == {"model": "operators across devices (model parallel)",
                                  "data": "batch shares (data parallel)"}
    assert view.RUN.header == "Run the plan: measured beside modelled" and "**Run this plan**" in view.RUN.intro
    assert view.BALANCE.intro == view.balance_intro() and view.BALANCE_RUN.intro == view.balance_run_intro()


@pytest.mark.parametrize("model", ["mobilenet_v3_small", "vit_small"])
def test_a_zoo_network_gets_every_section_of_the_page(model):
    # the largest operator graph offered (MobileNetV3-Small, 158 operators) and the one with attention
    pv = page(pl_model=model)
    s = every_section(pv)
    assert len(table(s["pl_assign"])) == len(pv.tasks) > 50


def test_the_scenarios_model_width_is_the_network_placed_and_run_and_the_page_says_so():
    sc = default_scenario()
    half = sc.replace(training=sc.training.replace(model_width=0.5))
    full, scaled = page(sc, pl_model="cnn"), page(half, pl_model="cnn")
    assert full.cost_model().notices == ()
    note = scaled.cost_model().notices[0].text
    assert "cnn is built at width 0.5×" in note and "Training page" in note
    assert scaled.operators == full.operators  # the same operators, with fewer channels
    assert scaled.og.total_flops < full.og.total_flops
    assert [op.flops for op in scaled.og.ops if op.name == "conv2"][0] * 4 == \
        [op.flops for op in full.og.ops if op.name == "conv2"][0]  # half the channels in and out
    items = scaled.plan_items({"pl_micro": 2, "pl_steps": 5, "pl_emulate": False})
    assert items[0][0].training.model_width == 0.5 and items[0][0].training.model == "cnn"


def test_the_resnet_presets_graph_and_assignment_read_at_1024_pixels():
    from lab.view.placement import plans
    from tests.figures.test_figures_placement import assert_labels_apart

    s = by_key(page(pl_model="resnet").assignment())
    dag = s["pl_dag"]
    assert len(dag.chart_input["tasks"]) == 26
    assert_labels_apart(getattr(figs, "dag_figure")(**dag.chart_input))
    rows = s["pl_assign"].table
    assert list(rows[0])[:3] == ["operator", "device", "why here"]  # the reason beside the device, numbers after
    longest = max(len(r["why here"]) for r in rows)
    assert s["pl_assign"].columns["why here"]["width"] >= plans.TABLE_CHAR_PX * longest  # the whole reason reads
    long = [{"operator": "net_encoder_layers_encoder_layer_0_ln_1", "device": "gpu", "why here": "x" * 500}]
    columns = plans.assignment_columns(long)
    width = columns["why here"]["width"]
    assert width < plans.text_px(500) and width + columns["operator"]["width"] + plans.text_px(6) == plans.TABLE_PX
    assert width >= 400  # a long operator name leaves the reason most of the row
