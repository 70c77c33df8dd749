"""What the Topology page shows of the cluster: its drawing, the transfer times between its devices, one route in
words, and the CXL design's claim checked on it (modelled: the numbers are the tables' assumptions)."""

from __future__ import annotations

from lab.scenario.catalogue import DEVICE_CATALOGUE, LINK_CATALOGUE
from lab.scenario.topology import Topology
from lab.scenario.units import fmt_rate, fmt_seconds
from lab.view.section import Notice, Section
from lab.view.topology_tables import compare_designs, comparison_target

INTRO = ("Build a heterogeneous cluster: devices (what each can compute, how fast; an FPGA is a chip whose circuits "
         "are configured for a task, a DPU a network card with processors of its own) and the links between them "
         "(CXL lets one device read another's memory directly; PCIe goes through the host CPU). Routes "
         "take the widest path; moving *n* bytes costs **latency + n / bottleneck bandwidth** (the slowest hop bounds "
         "the path). Device and link numbers are illustrative assumptions from public datasheets; edit them.")
EDIT = Section("topo_edit", header="Devices, switches and links", level="subheader", caption=(
    "Edit cells, add rows at the bottom, delete rows with the row selector. Throughput in TFLOP/s per operator "
    "class: an empty cell means the device has no kernel for that class and cannot run it. Choosing a link's kind "
    "fills in that kind's catalogue bandwidth and latency unless you typed your own."))
ROUTES = Section("topo_routes", header="Routes and transfer times", level="subheader")
CLAIM = Section("topo_claim", header="The CXL claim: does direct device-to-device access remove the host hop?",
                level="subheader", intro=(
                    "The CXL design's claim: with CXL a device reads another device's memory directly, without a copy "
                    "through the host. Compare your cluster with the same cluster wired with PCIe through the host "
                    "(every device that hung off a CXL switch gets a PCIe link to its pool's host CPU, with the "
                    "catalogue's PCIe numbers), or with a preset. These are the model's numbers from the tables "
                    "above: modelled, not measured on CXL hardware."))


def device_source(device_type: str) -> Section:
    """Where the catalogue's numbers for a device type come from."""
    return Section("topo_new_source", caption=DEVICE_CATALOGUE[device_type].source)


def link_source(kind: str) -> Section:
    """Where the catalogue's numbers for a link kind come from."""
    return Section("topo_new_link_source", caption="{source}", values={"source": LINK_CATALOGUE[kind][2]})


def network(topo: Topology) -> Section:
    return Section("topo_net", chart="topology.network_figure", chart_input=dict(topo=topo), kind="modelled",
                   caption="the cluster as the lab models it; numbers are the table's assumptions.")


def heatmap(topo: Topology, size_mb: float) -> Section:
    """The modelled time to move ``size_mb`` MB between every two devices."""
    nbytes = size_mb * 1e6
    return Section("topo_heat", chart="topology.path_heatmap", kind="modelled",
                   chart_input=dict(matrix=topo.path_matrix(nbytes), nbytes=nbytes),
                   caption="latency + bytes / bottleneck bandwidth along the widest route.")


def route(topo: Topology, a: str, b: str, size_mb: float, badge: str) -> Section:
    """The sentence under the route pickers: the route's nodes, hops, summed latency and, when it moves
    anything, its bottleneck link and the modelled time for ``size_mb`` MB followed by ``badge``."""
    path = topo.path(a, b)
    slow = path.slowest_link
    return Section("topo_route", text="Route **{route}**: " + f"{path.hops} hop(s), summed latency "
                   f"{fmt_seconds(path.latency)}, " + (
                       f"bottleneck {fmt_rate(path.bottleneck)} on link {{a}}–{{b}} ({slow.kind}); {size_mb:g} MB take "
                       f"{fmt_seconds(path.time(size_mb * 1e6))} {badge}." if slow else "same device: no transfer."),
                   values={"route": " → ".join(path.nodes), **({"a": slow.a, "b": slow.b} if slow else {})})


def comparison_text(span: tuple[float, float], size_mb: float, other_label: str, badge: str,
                    pairs: tuple[int, int] | None = None) -> str:
    """The sentence under the comparison: how many times as long the transfers take on the other
    design (``span``, the range of other-time / mine-time) and whether one is faster for every pair;
    with ``pairs`` (pairs drawn, pairs in all) when the figure draws only some, a sentence saying so."""
    lo, hi = span
    times = f"{lo:.2f}×" if hi - lo < 0.005 else f"{lo:.2f}× to {hi:.2f}×"
    verdict = ("this cluster is faster for every pair" if lo > 1.0005 else
               "this cluster is slower for every pair" if hi < 0.9995 else
               "neither is faster for every pair")
    drawn = (f" The bars show the first {pairs[0]:,} of the {pairs[1]:,} pairs; the range above covers them all."
             if pairs and pairs[0] < pairs[1] else "")
    return (f"In this model, device-to-device transfers of {size_mb:g} MB take {times} as long with "
            f"{other_label} as on this cluster: {verdict}. The gap comes from the link numbers in "
            f"the tables, not from a measurement {badge}.{drawn}")


def _info(text: str) -> list[Section]:
    return [Section("topo_cmp_none", notices=(Notice(text, "info", ":material/info:"),))]


def comparison(topo: Topology, other: str, size_mb: float, badge: str) -> list[Section]:
    """``topo``'s device-to-device transfers beside the same on ``other`` (the same cluster with PCIe through the
    host, or a preset), or why there is nothing to compare."""
    target = comparison_target(topo, other)
    if target is None:
        return _info(f"“{topo.name}” has no CXL link, so there is nothing to replace with PCIe: its transfers "
                     "already take the routes shown above. Choose a preset to compare with instead.")
    nbytes = size_mb * 1e6
    df, span = compare_designs(topo, target[0], nbytes, ("this cluster", target[1]))
    if span is None:
        return _info("This cluster and the chosen preset have fewer than two device names in common, so there is no "
                     "device-to-device transfer to compare.")
    return [Section("topo_cmp", chart="topology.comparison_figure", chart_input=dict(df=df, nbytes=nbytes),
                    kind="modelled", caption="routes, hop counts and bottlenecks on hover; host CPUs left out (the "
                                             "claim is about device-to-device transfers).",
                    text=comparison_text(span, size_mb, target[1], badge, df.attrs["pairs"]))]
