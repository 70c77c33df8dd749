"""A placement run computes what one process computes, on every preset, over 2 and 3 processes, for every
strategy; its pieces never wait on each other in a cycle; its emulated waits are the topology's numbers."""
from __future__ import annotations

import json
import math

import pytest
import torch

from lab.comm.spawn import run_local
from lab.errors import LabError
from lab.machine.plan_memory import modelled_peaks
from lab.modelled.costmodel import catalogue_slowdown
from lab.modelled.opgraph import trace
from lab.modelled.placement import STRATEGIES, order
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.models import build_model
from lab.scenario.topology import Topology
from lab.testing.plan_workers import load_outputs, plan_worker, replan_worker
from lab.train import placement_run
from lab.train.reference import placement_single_process

pytestmark = pytest.mark.usefixtures("spawns")  # every test here starts processes

STEPS = 4


def scenario(model: str, placement: dict | None = None, topology: str | dict = "edge", **training) -> Scenario:
    tr = Training(model=model, parallel="placement", batch_size=24, micro_batches=3, steps=STEPS, lr=0.01)
    tr = tr.replace(placement=placement or {}, **training)
    topo = preset(topology) if isinstance(topology, str) else Topology.from_dict(topology)
    return Scenario("plan", topo, tr)


def ops_of(model: str) -> list[str]:
    return trace(build_model(model, 64, 10), 24, 64).names


def run(sc: Scenario, tmp_path, dtype: str = "float64", steps: int = STEPS) -> list[dict]:
    sc = placement_run.resolved(sc)
    world = placement_run.stage_count(sc)
    assert world <= 4
    run_local(plan_worker, world, (sc.to_json(), steps, str(tmp_path), dtype), timeout_s=240)
    return [load_outputs(tmp_path, f"plan{r}") for r in range(world)]


def check_against_reference(sc: Scenario, outs: list[dict], tol: float, steps: int = STEPS) -> None:
    ref = placement_single_process(placement_run.resolved(sc), steps)
    holders = [o for o in outs if math.isfinite(o["losses"][0])]
    assert len(holders) == 1  # exactly one process computes the loss
    got = holders[0]["losses"]
    assert max(abs(a - b) for a, b in zip(got, ref["losses"])) <= tol, (got, ref["losses"])
    assert got[0] != got[-1]  # it trained
    seen = set()
    for o in outs:  # every parameter is held by exactly one process, and ends where the reference ends
        for name, values in o["params"].items():
            assert name not in seen
            seen.add(name)
            assert torch.allclose(values, ref["params"][name], atol=tol, rtol=0)
    assert seen == set(ref["params"])


def chain(model: str, devices: list[str]) -> dict:
    ops = ops_of(model)
    return {op: devices[i * len(devices) // len(ops)] for i, op in enumerate(ops)}


def interleaved(model: str, devices: list[str]) -> dict:
    """Round robin over the operators: the plan goes A -> B -> A (-> C ...) again and again."""
    return {op: devices[i % len(devices)] for i, op in enumerate(ops_of(model))}


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet", "transformer"])
@pytest.mark.parametrize("plan", ["chain2", "interleaved3"])
def test_a_placement_run_computes_what_one_process_computes(model, plan, tmp_path):
    devices = ["edge0", "edge1"] if plan == "chain2" else ["edge0", "edge1", "edge2"]
    placement = chain(model, devices) if plan == "chain2" else interleaved(model, devices)
    sc = scenario(model, placement)
    outs = run(sc, tmp_path)
    assert len(outs) == len(devices)
    check_against_reference(sc, outs, 1e-9)
    pieces = placement_run.pieces(build_model(model, 64, 10), placement_run.resolve(sc, build_model(model, 64, 10), 64))[0]
    if plan == "interleaved3":  # the plan returns to a device: more pieces than devices, no deadlock
        assert len(pieces) > len(devices)
        assert any(p.device == "edge0" for p in pieces[1:])
    for d, o in zip(devices, outs):  # each process ran every step (all recorded) in the models' order
        step = list(order.gpipe([p.index for p in pieces if p.device == d], 3))
        assert order.actions_in(o["events"]) == step * STEPS, d


@pytest.mark.parametrize("model,width", [("resnet18", 0.5), ("mobilenet_v3_small", 1.0), ("vgg11", 0.5),
                                         ("vit_small", 1.0)])
def test_a_zoo_network_cut_in_two_computes_what_one_process_computes(model, width, tmp_path):
    # torchvision's definitions write in place, read a class token outside any module and check shapes
    # with torch._assert: the cut handles each. A small batch keeps the float64 run short; batch norm still
    # sees two samples per micro-batch at its 1x1 maps. The two largest run at half width: the Scenario's
    # width reaches every process, and the reference builds the same network.
    sc = scenario(model, chain(model, ["edge0", "edge1"]), batch_size=4, micro_batches=2, emulate=False,
                  model_width=width)
    outs = run(sc, tmp_path, steps=2)
    assert len(outs) == 2
    check_against_reference(sc, outs, 1e-9, steps=2)


@pytest.mark.parametrize("preset_name", ["cnn", "transformer"])
def test_an_uploaded_onnx_network_cut_in_two_computes_what_one_process_computes(preset_name, tmp_path, monkeypatch):
    from lab.scenario import onnx_models
    from tests.scenario.test_onnx_models import exported

    monkeypatch.setenv("LAB_DATA", str(tmp_path / "data"))  # the processes find the kept file there
    name = onnx_models.keep(exported(preset_name)[1], f"{preset_name}.onnx").name
    sc = scenario(name, chain(name, ["edge0", "edge1"]), emulate=False)
    outs = run(sc, tmp_path, steps=3)
    assert len(outs) == 2
    check_against_reference(sc, outs, 1e-9, steps=3)


def four_devices() -> dict:
    """The CXL preset without its DPU: every strategy's plan fits in the 4 processes a test may start."""
    d = preset("cxl").to_dict()
    d["devices"] = [x for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    return d


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_runs_its_plan_to_the_end_with_pins(strategy, tmp_path):
    sc = scenario("cnn", topology=four_devices(), strategy=strategy, pins={"conv1": "fpga"}, emulate=False)
    plan = placement_run.resolve(placement_run.resolved(sc), build_model("cnn", 64, 10), 64)
    assert plan.assignment["conv1"] == "fpga"
    outs = run(sc, tmp_path, dtype="float32")
    # float32: the same operations in the same order as one process, except gradients of a tensor read by
    # two pieces, which are summed in another order; a few float32 roundings over 4 steps.
    check_against_reference_f32(sc, outs)


def check_against_reference_f32(sc, outs):
    ref = placement_single_process(placement_run.resolved(sc), STEPS, dtype=torch.float32)
    got = next(o["losses"] for o in outs if math.isfinite(o["losses"][0]))
    assert max(abs(a - b) for a, b in zip(got, ref["losses"])) <= 1e-5


def test_the_emulated_waits_are_the_topologys_numbers(tmp_path):
    sc = scenario("cnn", {"conv1": "fpga", "act1": "gpu", "pool1": "gpu", "conv2": "fpga", "act2": "gpu",
                          "pool2": "gpu", "fc1": "gpu", "act3": "gpu", "fc2": "gpu"}, topology="pcie", emulate=True)
    outs = run(sc, tmp_path, dtype="float32")
    topo = sc.topology
    plan = placement_run.resolve(sc, build_model("cnn", 64, 10), 64)
    scales = placement_run.op_scales(sc, plan)
    waits = 0
    for o in outs:
        ev = o["events"]
        fwd = [e for e in ev if e["kind"] == "forward"]
        warm: dict = {}  # (piece, op) -> the operator's warm time, as each of its waits implies
        for e in ev:
            if e["kind"] == "emulated" and e["op"] is not None:
                # the operator ran for real before its wait
                assert any((f["piece"], f["micro"], f["op"]) == (e["piece"], e["micro"], e["op"])
                           and f["end"] <= e["start"] for f in fwd)
                cls = plan.op_class[e["op"]]
                s = catalogue_slowdown(topo, topo.device(plan.assignment[e["op"]]), cls)
                assert scales[e["op"]] == s
                # the wait is the slow-down times the operator's warm time: one time per operator in every step
                # (each micro-batch has 8 samples), not what each run of it took after the last wait
                warm.setdefault((e["piece"], e["op"]), []).append(e["wait"] / (s - 1))
                waits += 1
            if e["kind"] in ("activation", "gradient"):
                link = topo.transfer_time(e["src"], e["dst"], e["bytes"])
                assert link > 0 and e["link"] == link
                # the tensor arrives no sooner than the topology's link time after it was sent
                assert e["end"] - e["start"] >= link - 1e-9
                assert 0.0 <= e["wait"] <= link
                waits += 1
        for times in warm.values():
            assert len(times) == STEPS * sc.training.micro_batches and 0 < times[0] < math.inf
            assert max(times) == pytest.approx(min(times), rel=1e-12)
    assert waits > 0


def test_a_plan_that_does_not_fit_the_model_is_refused_with_the_operator_named():
    sc = scenario("mlp", {"nope": "edge0"})
    with pytest.raises(LabError, match="nope"):
        placement_run.check_placement(sc)
    sc = scenario("cnn", {op: "asic" for op in ops_of("cnn")}, topology="cxl")
    with pytest.raises(LabError, match="no kernel"):
        placement_run.check_placement(sc)
    with pytest.raises(LabError, match="compression"):
        placement_run.check_placement(scenario("mlp", compression={"kind": "topk"}))


@pytest.mark.parametrize("model", ["cnn", "resnet"])
def test_a_run_that_moves_operators_between_rounds_computes_what_one_process_computes(model, tmp_path):
    """A balancing round's new plan moves operators (with their parameters, buffers and optimiser state) to other
    processes; the run goes on exactly as one process would: float64 losses and parameters to 1e-9."""
    devices = ["edge0", "edge1", "edge2"]
    ops = ops_of(model)
    plans = [chain(model, devices), interleaved(model, devices), {op: devices[-1 - i * 3 // len(ops)]
                                                                  for i, op in enumerate(ops)}]
    topo = preset("edge").to_dict()
    topo["devices"] = [d for d in topo["devices"] if d["name"] in devices]
    topo["links"] = [x for x in topo["links"] if x["a"] in devices + ["edge-switch"] and x["b"] in devices + ["edge-switch"]]
    sc = scenario(model, plans[0], topology=topo, balance="wait", round_steps=2, optimizer="adabelief")
    assert placement_run.stage_count(sc) == 3
    per = 2
    run_local(replan_worker, 3, (sc.to_json(), json.dumps(plans), per, str(tmp_path)), timeout_s=240)
    outs = [load_outputs(tmp_path, f"replan{r}") for r in range(3)]
    ref = placement_single_process(sc, per * len(plans))
    got = []
    for k in range(per * len(plans)):  # the loss is where the last operator is, which moves with the plans
        finite = [o["losses"][k] for o in outs if math.isfinite(o["losses"][k])]
        assert len(finite) == 1
        got.append(finite[0])
    assert max(abs(a - b) for a, b in zip(got, ref["losses"])) <= 1e-9
    assert got[0] != got[-1]
    assert len({tuple(map(tuple, o["held"])) for o in outs}) == 3  # the processes held different pieces...
    assert any(len({tuple(h) for h in o["held"]}) > 1 for o in outs)  # ...and what one held changed
    seen = set()
    for o in outs:
        for name, values in o["params"].items():
            assert name not in seen
            seen.add(name)
            assert torch.allclose(values, ref["params"][name], atol=1e-9, rtol=0)
    assert seen == set(ref["params"])


@pytest.mark.parametrize("cut", [chain, interleaved])
def test_a_reviewers_network_with_batch_norm_cut_anywhere_computes_what_one_process_computes(cut, tmp_path,
                                                                                          monkeypatch):
    # batch norm reads its statistics through the export's Identity nodes; the interleaved cut puts nearly
    # every operator on the other device from its neighbours
    from lab.scenario import onnx_models
    from tests.scenario.reviewer_net import exported

    monkeypatch.setenv("LAB_DATA", str(tmp_path / "data"))
    name = onnx_models.keep(exported()[1], "reviewer.onnx").name
    sc = scenario(name, cut(name, ["edge0", "edge1"]), emulate=False)
    outs = run(sc, tmp_path, steps=3)
    assert len(outs) == 2
    check_against_reference(sc, outs, 1e-9, steps=3)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_1f1b_run_computes_what_one_process_computes_in_its_own_order(model, tmp_path):
    devices = ["edge0", "edge1", "edge2"]
    sc = scenario(model, chain(model, devices), schedule="1f1b", micro_batches=4)
    outs = run(sc, tmp_path)
    check_against_reference(sc, outs, 1e-9)
    for k, (d, o) in enumerate(zip(devices, outs)):  # each process ran 1F1B's list for its piece, every step
        step = list(order.schedule("1f1b", [k], 3, 4))
        assert order.actions_in(o["events"]) == step * STEPS, d
    # The bytes each process saved for the backward at its peak are the memory model's, under 1F1B's order;
    # GPipe's order on the same plan holds all 4 micro-batches on the first stage where 1F1B holds 3.
    modelled = modelled_peaks(sc, torch.float64)
    gpipe = modelled_peaks(sc.replace(training=sc.training.replace(schedule="gpipe")), torch.float64)
    for d, o in zip(devices, outs):
        assert o["saved_peak"] == pytest.approx(modelled[d], rel=1e-6), d
    assert gpipe["edge0"] == pytest.approx(modelled["edge0"] * 4 / 3, rel=1e-6)
    assert gpipe["edge2"] == pytest.approx(modelled["edge2"] * 4, rel=1e-6)
    bad = scenario(model, interleaved(model, devices), schedule="1f1b")
    with pytest.raises(LabError, match="1F1B runs one piece per device"):  # refused before any process starts
        placement_run.check_placement(placement_run.resolved(bad))


def looped(model: str, devices: list[str], rounds: int) -> dict:
    """The operators cut into ``rounds * len(devices)`` stretches that go round the devices in turn."""
    ops = ops_of(model)
    n = rounds * len(devices)
    return {op: devices[(i * n // len(ops)) % len(devices)] for i, op in enumerate(ops)}


@pytest.mark.parametrize("model,micro", [("cnn", 4), ("transformer", 3)])
def test_an_interleaved_1f1b_run_computes_what_one_process_computes_in_torchs_order(model, micro, tmp_path):
    devices = ["edge0", "edge1"]
    sc = scenario(model, looped(model, devices, 2), schedule="interleaved_1f1b", micro_batches=micro)
    plan = placement_run.check_placement(placement_run.resolved(sc))  # refused here if it did not go round
    outs = run(sc, tmp_path)
    check_against_reference(sc, outs, 1e-9)
    m = build_model(model, 64, 10)
    cut = placement_run.pieces(m, placement_run.resolve(placement_run.resolved(sc), m, 64))[0]
    assert [p.device for p in cut] == ["edge0", "edge1", "edge0", "edge1"] and plan.devices == devices
    for r, (d, o) in enumerate(zip(devices, outs)):  # each process ran torch's interleaved order, every step
        step = list(order.schedule("interleaved_1f1b", [r, r + 2], 4, micro))
        assert order.actions_in(o["events"]) == step * STEPS, d
    modelled = modelled_peaks(sc, torch.float64)
    for d, o in zip(devices, outs):  # the counted bytes are the memory model's under the same lists
        assert o["saved_peak"] == pytest.approx(modelled[d], rel=1e-6), d


@pytest.mark.parametrize("model,plan,micro", [("mlp", "chain", 4), ("cnn", "chain", 4), ("resnet", "chain", 3),
                                              ("transformer", "looped", 4)])
def test_a_zero_bubble_run_splits_each_backward_as_torch_does_and_computes_what_one_process_computes(
        model, plan, micro, tmp_path):
    # torch's own split of a backward (its pipelining's stage_backward_input and stage_backward_weight), on a chain
    # whose middle piece ends in a flatten (a view: cnn), on one with batch norm in it (resnet) and on a plan that
    # goes round the devices twice
    devices = ["edge0", "edge1"] if plan == "looped" else ["edge0", "edge1", "edge2"]
    placement = looped(model, devices, 2) if plan == "looped" else chain(model, devices)
    sc = scenario(model, placement, schedule="zero_bubble", micro_batches=micro)
    placement_run.check_placement(placement_run.resolved(sc))
    outs = run(sc, tmp_path)
    check_against_reference(sc, outs, 1e-9)
    pieces = len(devices) * (2 if plan == "looped" else 1)
    for r, (d, o) in enumerate(zip(devices, outs)):  # each process ran torch's zero-bubble order, every step
        step = list(order.schedule("zero_bubble", list(range(r, pieces, len(devices))), pieces, micro))
        assert order.actions_in(o["events"]) == step * STEPS, d
        kinds = {e["kind"] for e in o["events"]}
        assert {"backward_input", "backward_weight"} <= kinds and "backward" not in kinds, d
    modelled = modelled_peaks(sc, torch.float64)
    for d, o in zip(devices, outs):  # what the forward saved is held until the weights' gradient, as modelled
        assert o["saved_peak"] == pytest.approx(modelled[d], rel=1e-6), d


def test_an_emulated_zero_bubble_run_waits_on_each_half_s_warm_time_and_computes_what_one_process_computes(
        tmp_path):
    # the host is about ten times slower than the GPU for a matmul: its piece waits after each half of its backward
    sc = scenario("mlp", chain("mlp", ["gpu", "host"]), topology="pcie", schedule="zero_bubble", micro_batches=4,
                  emulate=True)
    outs = run(sc, tmp_path)
    check_against_reference(sc, outs, 1e-9)
    host = outs[1]["events"]
    halves = [e for e in host if e["kind"] in ("backward_input", "backward_weight")]
    waits: dict = {}
    for e in host:
        if e["kind"] == "emulated" and e["op"] is None:
            before = max((h for h in halves if h["micro"] == e["micro"] and h["end"] <= e["start"]),
                         key=lambda h: h["end"])
            waits.setdefault(before["kind"], []).append(e["wait"])
    assert set(waits) == {"backward_input", "backward_weight"}
    for kind, got in waits.items():  # one warm time per half, in every micro-batch and step
        assert len(got) == STEPS * 4 and got[0] > 0, kind
        assert max(got) == pytest.approx(min(got), rel=1e-12), kind
