"""lab.figures.topology: the sentence under the Topology page's route pickers."""

from lab.figures.topology import route_summary
from lab.scenario.catalogue import preset


def test_route_summary_names_the_route_its_bottleneck_and_time():
    p = preset("cxl").path("host", "gpu")  # two CXL hops through the switch: 0.25 µs each, 64 GB/s
    text = route_summary(p, 10.0, str, "BADGE")
    # 10 MB: 0.5 µs + 10e6 B / 64e9 B/s = 156.75 µs
    assert text == ("Route **host → cxl-switch → gpu**: 2 hop(s), summed latency 500 ns, bottleneck 64 GB/s on "
                    "link host–cxl-switch (cxl); 10 MB take 157 µs BADGE.")


def test_route_summary_quotes_node_names_and_handles_one_device():
    p = preset("pcie").path("gpu", "fpga")
    text = route_summary(p, 1.0, lambda s: f"<{s}>", "B")
    assert text.startswith("Route **<gpu> → <host> → <fpga>**: 2 hop(s)")
    assert "on link <" in text and "(pcie); 1 MB take" in text
    same = route_summary(preset("cxl").path("gpu", "gpu"), 10.0, str, "B")
    assert same == "Route **gpu**: 0 hop(s), summed latency 0 s, same device: no transfer."
