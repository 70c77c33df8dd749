"""lab.machine.calibrated_model: the calibrated model gives an operator this machine's fitted cost times
the catalogue's slow-down of its device, and adds up to the compute the Training page predicts."""

import dataclasses
import math

import pytest

from lab.errors import LabError
from lab.machine.calibrate import synthetic_profile
from lab.machine.calibrated_model import CalibratedModel, cost_model
from lab.machine.predict import predict_step
from lab.machine.profile import COMPUTE_CLASSES, ClassCost, ComputeFit
from lab.modelled import placement as pl
from lab.modelled.costmodel import DATASHEET
from lab.modelled.opgraph import trace
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.models import build_model
from lab.scenario.topology import Device, Topology


def profile():
    """Different costs per class, so a wrong class or a missed 2/3 shows."""
    classes = {c: ClassCost(overhead=(i + 1) * 1e-6, throughput=(i + 1) * 1e9) for i, c in enumerate(COMPUTE_CLASSES)}
    return dataclasses.replace(synthetic_profile(), compute=ComputeFit(classes, 3e-4, 2e-6, 0.0, 0))


ALL = {c: 1e12 for c in ("matmul", "elementwise", "norm", "conv", "pool", "other")}


def test_sum_over_operators_is_the_predicted_forward_backward():
    prof = profile()
    one = Topology("one", (Device("cpu0", "cpu", throughput=ALL),), ())
    graph = trace("mlp", 32)
    model = CalibratedModel(prof)
    ops = sum(model.op_seconds(op, one.device("cpu0"), one) for op in graph.ops)
    tensors = len([p for p in build_model("mlp", 64, 10).parameters()])
    sc = Scenario(name="one worker", topology=preset("cxl"), training=Training(model="mlp", workers=1, batch_size=32, steps=5))
    fb = predict_step(sc, prof).per_worker[0].fb
    assert fb == pytest.approx(ops + prof.compute.fixed + prof.compute.per_tensor * tensors, rel=1e-12)


def test_a_device_slower_in_the_catalogue_is_as_much_slower_here():
    prof = profile()
    topo = Topology("two", (Device("fast", "gpu", throughput={**ALL, "matmul": 8e12}),
                            Device("slow", "cpu", throughput={"matmul": 2e12, "elementwise": 1e12})), ())
    graph = trace("mlp", 32)
    model = CalibratedModel(prof)
    mm = next(op for op in graph.ops if op.op_class == "matmul")
    fast, slow = model.op_seconds(mm, topo.device("fast"), topo), model.op_seconds(mm, topo.device("slow"), topo)
    assert slow == pytest.approx(4 * fast)
    norm = next((op for op in graph.ops if op.op_class not in ("matmul", "elementwise")), None)
    if norm is not None:
        assert math.isinf(model.op_seconds(norm, topo.device("slow"), topo))
    # The datasheet model's number is another one: the two are told apart by name and by what they cover.
    assert DATASHEET.op_seconds(mm, topo.device("fast"), topo) != fast
    assert (model.name, model.pass_) == ("calibrated", "forward + backward")
    assert "2000-01-01" in model.describe()
    s = pl.run_strategy("greedy_eft", pl.TaskGraph.from_model(graph, topo, model=model))
    assert math.isfinite(s.makespan) and s.makespan > 0


def test_choosing_a_model_by_name():
    assert cost_model("datasheet", None) is DATASHEET
    assert isinstance(cost_model("calibrated", profile()), CalibratedModel)
    with pytest.raises(LabError, match="calibrate"):
        cost_model("calibrated", None)
    with pytest.raises(LabError, match="unknown cost model"):
        cost_model("<b>magic</b>", None)
