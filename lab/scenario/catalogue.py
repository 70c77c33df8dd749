"""Illustrative device and link defaults, and the preset topologies built from them.

These numbers are ASSUMPTIONS for teaching and what-if questions, not measurements. Peak
figures come from public datasheets where one exists (named in ``source``); the split into
operator classes (what fraction of peak a convolution or an element-wise kernel reaches) is the
lab's own rough assumption, since element-wise and normalisation kernels are memory-bound.
Every value is editable in the Topology page.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.errors import LabError
from lab.scenario.topology import Device, Link, Switch, Topology

T = 1e12
G = 1e9


@dataclass(frozen=True)
class CatalogueEntry:
    type: str
    example: str
    memory: float  # bytes
    throughput: dict  # FLOP/s per operator class (FP32 unless said)
    source: str


#: One entry per device type. Kernels: a class absent from ``throughput`` has no kernel there.
DEVICE_CATALOGUE: dict[str, CatalogueEntry] = {
    "cpu": CatalogueEntry(
        "cpu", "2-socket-class server CPU, 40 cores AVX-512", 256e9,
        {"matmul": 2.0 * T, "conv": 1.0 * T, "elementwise": 0.05 * T, "norm": 0.05 * T,
         "pool": 0.05 * T, "other": 0.05 * T},
        "Intel Xeon Platinum 8380 datasheet: 40 cores, 2.3 GHz, 2 AVX-512 FMA units "
        "(~2.9 TFLOP/s FP32 peak); class split assumed"),
    "gpu": CatalogueEntry(
        "gpu", "data-centre GPU (A100-class)", 40e9,
        {"matmul": 19.5 * T, "conv": 15.0 * T, "elementwise": 0.4 * T, "norm": 0.3 * T,
         "pool": 0.4 * T, "other": 0.4 * T},
        "NVIDIA A100 datasheet: 19.5 TFLOP/s FP32, 1.6 TB/s HBM2 (element-wise bound by memory, "
        "~0.4 TFLOP/s at 4 bytes/FLOP); class split assumed"),
    "fpga": CatalogueEntry(
        "fpga", "data-centre FPGA card (Alveo U250-class) with a convolution overlay", 64e9,
        {"conv": 2.0 * T, "pool": 0.2 * T, "elementwise": 0.1 * T},
        "Xilinx Alveo U250 product brief: 12,288 DSP slices, 77 GB/s DDR4; FP32 convolution "
        "throughput of a custom overlay assumed; no matmul kernel in this illustration"),
    "asic": CatalogueEntry(
        "asic", "activation / normalisation ASIC", 8e9,
        {"elementwise": 1.0 * T, "norm": 0.8 * T},
        "no public part: an illustrative fixed-function activation engine (the CXL design's ASIC role)"),
    "dpu": CatalogueEntry(
        "dpu", "data-processing unit (BlueField-2-class)", 16e9,
        {"elementwise": 0.05 * T, "pool": 0.03 * T, "other": 0.05 * T},
        "NVIDIA BlueField-2 datasheet: 8 Arm A72 cores, 16 GB DDR4; FLOP/s assumed from core count"),
    "npu": CatalogueEntry(
        "npu", "training NPU (Ascend 910-class)", 32e9,
        {"matmul": 64 * T, "conv": 50 * T, "elementwise": 0.5 * T, "norm": 0.4 * T,
         "pool": 0.5 * T, "other": 0.3 * T},
        "Huawei Ascend 910 brief: 256 TFLOP/s FP16, 1.2 TB/s HBM; FP32-equivalent quarter assumed"),
    "tpu": CatalogueEntry(
        "tpu", "TPU v4-class chip", 32e9,
        {"matmul": 68 * T, "conv": 55 * T, "elementwise": 0.6 * T, "norm": 0.5 * T, "pool": 0.5 * T},
        "Google TPU v4 paper: 275 TFLOP/s bf16, 1.2 TB/s HBM; FP32-equivalent quarter assumed"),
}

#: Typical per-direction bandwidth (bytes/s) and one-hop latency (s) per link kind.
LINK_CATALOGUE: dict[str, tuple[float, float, str]] = {
    "cxl": (64 * G, 250e-9, "CXL 2.0 over PCIe 5.0 x16: 64 GB/s per direction; ~250 ns load-to-use"),
    "pcie": (32 * G, 900e-9, "PCIe 4.0 x16: 31.5 GB/s per direction; ~0.9 us one-way with DMA set-up"),
    "upi": (20.8 * G, 150e-9, "Intel UPI at 11.2 GT/s: 20.8 GB/s per direction per link"),
    "nvlink": (300 * G, 500e-9, "NVLink 3 (A100): 600 GB/s total, 300 GB/s per direction"),
    "switch": (32 * G, 500e-9, "PCIe 4.0 / CXL switch port x16; ~0.5 us per switch hop"),
    "ethernet": (12.5 * G, 5e-6, "100 GbE: 12.5 GB/s; ~5 us with RDMA, more with TCP"),
}


def catalogue_device(name: str, type: str, pool: str = "pool0") -> Device:
    entry = DEVICE_CATALOGUE[type]
    return Device(name=name, type=type, pool=pool, memory=entry.memory, throughput=dict(entry.throughput))


def catalogue_link(a: str, b: str, kind: str, bandwidth: float | None = None, latency: float | None = None) -> Link:
    bw, lat, _ = LINK_CATALOGUE[kind]
    return Link(a, b, kind, bandwidth if bandwidth is not None else bw, latency if latency is not None else lat)


def _pool(prefix: str, pool: str) -> list[Device]:
    return [catalogue_device(f"{prefix}host", "cpu", pool), catalogue_device(f"{prefix}gpu", "gpu", pool),
            catalogue_device(f"{prefix}fpga", "fpga", pool), catalogue_device(f"{prefix}asic", "asic", pool),
            catalogue_device(f"{prefix}dpu", "dpu", pool)]


def preset_cxl() -> Topology:
    devs = _pool("", "pool0")
    sw = Switch("cxl-switch")
    links = [catalogue_link(d.name, sw.name, "cxl") for d in devs]
    return Topology("cxl", tuple(devs), tuple(links), (sw,),
                    "The CXL design: one host with a GPU, an FPGA, an ASIC and a DPU on a CXL switch; "
                    "any device reads another's memory directly (one switch hop, no host copy).").validate()


def preset_pcie() -> Topology:
    devs = _pool("", "pool0")
    links = [catalogue_link("host", d.name, "pcie") for d in devs[1:]]
    return Topology("pcie", tuple(devs), tuple(links), (),
                    "The CXL design's baseline: the same devices on PCIe to the host; every device-to-device "
                    "transfer goes through the host (two hops, the slower bounds the path).").validate()


def preset_two_pools() -> Topology:
    devs = _pool("p0-", "pool0") + _pool("p1-", "pool1")
    sws = (Switch("p0-cxl"), Switch("p1-cxl"), Switch("fabric"))
    links = [catalogue_link(d.name, "p0-cxl", "cxl") for d in devs[:5]]
    links += [catalogue_link(d.name, "p1-cxl", "cxl") for d in devs[5:]]
    links += [catalogue_link("p0-host", "p1-host", "upi"),
              catalogue_link("p0-cxl", "fabric", "switch"), catalogue_link("p1-cxl", "fabric", "switch")]
    return Topology("two-pools", tuple(devs), tuple(links), sws,
                    "The CXL design: two resource pools, each a host and four devices on CXL; hosts linked by "
                    "UPI, devices of different pools reach each other through a fabric switch.").validate()


def preset_gpu_npu() -> Topology:
    devs = [catalogue_device("master", "cpu", "control")]
    devs += [catalogue_device(f"gpu{i}", "gpu", "gpu-group") for i in range(4)]
    devs += [catalogue_device(f"npu{i}", "npu", "npu-group") for i in range(4)]
    sws = (Switch("gpu-nvswitch"), Switch("npu-hccs"), Switch("tor"))
    links = [catalogue_link(f"gpu{i}", "gpu-nvswitch", "nvlink") for i in range(4)]
    links += [catalogue_link(f"npu{i}", "npu-hccs", "switch", bandwidth=56 * G) for i in range(4)]
    links += [catalogue_link("gpu-nvswitch", "tor", "ethernet"), catalogue_link("npu-hccs", "tor", "ethernet"),
              catalogue_link("master", "tor", "ethernet", bandwidth=3.125 * G)]
    return Topology("gpu-npu", tuple(devs), tuple(links), sws,
                    "The task-level design: resource groups of one hardware type each (4 GPUs on NVLink, 4 NPUs on an "
                    "HCCS-like 56 GB/s fabric), joined by 100 GbE; a 25 GbE task-manager node.").validate()


def preset_edge() -> Topology:
    edge_flops = {"matmul": 13.5 * G, "conv": 10 * G, "elementwise": 2 * G, "norm": 2 * G,
                  "pool": 2 * G, "other": 2 * G}
    devs = [Device(f"edge{i}", "cpu", "edge", 4e9, dict(edge_flops)) for i in range(8)]
    sw = Switch("edge-switch")
    links = [Link(d.name, sw.name, "ethernet", 100e6 / 8, 200e-6) for d in devs]
    return Topology("edge", tuple(devs), tuple(links), (sw,),
                    "The edge-compression design: eight weak edge devices (Raspberry Pi 4-class: 4x Cortex-A72, ~13.5 GFLOP/s "
                    "FP32) on a 100 Mbit/s Ethernet switch (12.5 MB/s, 200 us per hop).").validate()


PRESETS = {
    "cxl": preset_cxl,
    "pcie": preset_pcie,
    "two-pools": preset_two_pools,
    "gpu-npu": preset_gpu_npu,
    "edge": preset_edge,
}
PRESET_LABELS = {
    "cxl": "(1) one host + GPU, FPGA, ASIC, DPU on CXL",
    "pcie": "(2) the same devices on PCIe (through the host)",
    "two-pools": "(3) two pools: UPI between hosts, switch between devices",
    "gpu-npu": "(4) GPU + NPU resource groups on Ethernet",
    "edge": "(5) edge cluster: 8 weak devices on 100 Mbit/s",
}


def preset(name: str) -> Topology:
    if name not in PRESETS:
        raise LabError(f"no preset named {name!r}; presets: {list(PRESETS)}")
    return PRESETS[name]()


def has_cxl(topo: Topology) -> bool:
    """Whether any link of ``topo`` is a CXL link."""
    return any(l.kind == "cxl" for l in topo.links)


def host_of(topo: Topology, device: str) -> str:
    """The host CPU of ``device``'s pool: the first device of type ``cpu`` in that pool (in the
    topology's order), else the first ``cpu`` of the whole topology (a pool without a host of its
    own borrows one). Raises LabError when the topology has no CPU at all."""

    pool = topo.device(device).pool
    cpus = [d for d in topo.devices if d.type == "cpu"]
    if not cpus:
        raise LabError("the cluster has no host CPU (a device of type cpu) to route PCIe through")
    own = [d.name for d in cpus if d.pool == pool]
    return own[0] if own else cpus[0].name


def as_pcie(topo: Topology) -> Topology:
    """The same cluster with its CXL links replaced by PCIe through the host.

    The rule, applied to a copy of ``topo`` (devices, their numbers and every non-CXL link stay):

    1. Every CXL link is removed.
    2. Every device that had a CXL link (to a CXL switch, or directly to another device) gets a
       PCIe link, with the PCIe catalogue numbers (:data:`LINK_CATALOGUE` ``"pcie"``), to the host
       CPU of its pool (:func:`host_of`), unless it is that host or the two are already linked.
    3. A host CPU that had a CXL link to a switch gets a PCIe link to that switch instead, so
       whatever was reachable beyond the switch (a fabric to another pool) stays reachable, now
       through the host.
    4. Switches left with fewer than two links are removed with their link (repeatedly), and so are
       groups of switches that no longer reach any device.

    So every device-to-device transfer that took a CXL switch now goes device → host → device,
    as on a PCIe-only server. A topology without a CXL link comes back unchanged (renamed). Raises
    LabError when the result cannot be built (no host CPU, or a part of the cluster that only CXL
    joined to the rest)."""

    bw, lat, _ = LINK_CATALOGUE["pcie"]
    devices = {d.name for d in topo.devices}
    switches = {s.name for s in topo.switches}
    kept = [l for l in topo.links if l.kind != "cxl"]
    linked = {frozenset((l.a, l.b)) for l in kept}
    added: list[Link] = []

    def connect(a: str, b: str) -> None:
        pair = frozenset((a, b))
        if a != b and pair not in linked:
            linked.add(pair)
            added.append(Link(a, b, "pcie", bw, lat))

    for l in topo.links:
        if l.kind != "cxl":
            continue
        for end, other in ((l.a, l.b), (l.b, l.a)):
            if end not in devices:
                continue
            host = host_of(topo, end)
            if end != host:
                connect(end, host)
            elif other in switches:
                connect(host, other)
    links = kept + added
    while True:  # rule 4: drop switches that no longer join two things
        degree: dict[str, int] = {}
        for l in links:
            for end in (l.a, l.b):
                degree[end] = degree.get(end, 0) + 1
        loose = {s for s in switches if degree.get(s, 0) < 2}
        if not loose:
            break
        switches -= loose
        links = [l for l in links if l.a not in loose and l.b not in loose]
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(devices | switches)
    g.add_edges_from((l.a, l.b) for l in links)
    for part in list(nx.connected_components(g)):
        if not part & devices:
            switches -= part
            links = [l for l in links if l.a not in part]
    out = Topology(f"{topo.name}-pcie", topo.devices, tuple(links),
                   tuple(s for s in topo.switches if s.name in switches),
                   f"{topo.name} with its CXL links replaced by PCIe through the host.")
    try:
        return out.validate()
    except LabError as exc:
        raise LabError(f"the same cluster with PCIe through the host cannot be built: {exc}") from None
