"""lab.train.emulation: the FLOPs a worker's wait is scaled by (against torch's own FLOP counter),
the workers' devices and scales, the parameter server's device, and the emulated link times."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lab.errors import LabError
from lab.scenario.catalogue import preset
from lab.scenario.document import default_scenario
from lab.scenario.models import build_model
from lab.train.emulation import (
    dominant_op_class,
    op_flops,
    ring_allreduce_time,
    ring_link_delay,
    server_device,
    worker_devices,
)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_layer_flops_match_torchs_flop_counter(name):
    model = build_model(name, 64, 10, seed=0)
    ours = op_flops(model, 64)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model.eval()(torch.zeros(1, 64))
    counts = counter.get_flop_counts()["Global"]
    mm = sum(v for k, v in counts.items() if "mm" in str(k) or "addmm" in str(k) or "linear" in str(k))
    conv = sum(v for k, v in counts.items() if "convolution" in str(k))
    assert ours["matmul"] == pytest.approx(mm)
    assert ours["conv"] == pytest.approx(conv)
    assert dominant_op_class(model, 64) == ("conv" if conv > mm else "matmul")


def test_workers_scale_against_the_fastest_mapped_device():
    topo = preset("cxl")
    gpus = [d.name for d in topo.devices if "matmul" in d.throughput]
    fast = max(gpus, key=lambda n: topo.device(n).throughput["matmul"])
    slow = min(gpus, key=lambda n: topo.device(n).throughput["matmul"])
    em = worker_devices(topo, (fast, slow, "unused"), 2, "matmul")
    assert em.devices == (fast, slow)
    ratio = topo.device(fast).throughput["matmul"] / topo.device(slow).throughput["matmul"]
    assert em.scales == pytest.approx((1.0, ratio))
    assert sum(em.shares) == pytest.approx(1.0) and em.shares[0] >= em.shares[1]
    with pytest.raises(LabError, match="only 1 device"):
        worker_devices(topo, (fast,), 2, "matmul")
    no_kernel = next((d.name for d in topo.devices if "conv" not in d.throughput), None)
    if no_kernel is not None:
        with pytest.raises(LabError, match="no conv kernel"):
            worker_devices(topo, (no_kernel,), 1, "conv")


def test_server_device_is_the_next_mapped_one_or_a_host_cpu():
    topo = preset("cxl")
    names = topo.device_names
    assert server_device(topo, (names[1], names[2]), 1) == names[2]
    cpu = next(d.name for d in topo.devices if d.type == "cpu")
    assert server_device(topo, (names[1],), 1) == cpu
    with pytest.raises(LabError):
        server_device(topo, (names[1], "no such device"), 1)


def test_link_times_are_the_route_formula():
    topo = preset("cxl")
    a, b = topo.device_names[:2]
    delay = ring_link_delay(topo, (a, b, a))
    assert delay(0, 1, 1_000_000) == pytest.approx(topo.transfer_time(a, b, 1_000_000))
    assert delay(0, 2, 1_000_000) == 0.0  # the same device: no link
    # The ring: 2(N-1) steps, each the slowest neighbour transfer of one N-th of the bytes (brute force).
    devs = (a, b, topo.device_names[2])
    n, nbytes = 3, 3e6
    slowest = max(topo.transfer_time(devs[r], devs[(r + 1) % n], nbytes / n) for r in range(n))
    assert ring_allreduce_time(topo, devs, nbytes) == pytest.approx(2 * (n - 1) * slowest)
    assert ring_allreduce_time(topo, (a,), nbytes) == 0.0


def test_emulation_scales_and_errors():
    from lab.train import emulation as emu

    topo = default_scenario().topology
    assert emu.dominant_op_class(build_model("mlp"), 64) == "matmul"
    assert emu.dominant_op_class(build_model("cnn"), 64) == "conv"
    e = emu.worker_devices(topo, ("gpu", "host", "gpu"), 3, "matmul")
    assert e.scales == pytest.approx((1.0, 9.75, 1.0))
    with pytest.raises(LabError, match="no matmul kernel"):
        emu.worker_devices(topo, ("gpu", "fpga"), 2, "matmul")
    with pytest.raises(LabError, match="only 1 device"):
        emu.worker_devices(topo, ("gpu",), 2, "matmul")
    t = emu.ring_allreduce_time(topo, ("gpu", "host"), 1e6)
    assert t == pytest.approx(2 * topo.transfer_time("gpu", "host", 5e5))
