"""lab.figures.compression: compressors on one gradient (error, bytes, time), the sparse ring's fill-in,
bytes per sharing method, the Cholesky claim and the preset grid; units kB, ms, µs and %."""

import numpy as np
import pytest
import torch

from lab.view.sharing import sharing_report
from lab.compression.cholesky import compare_methods
from lab.compression.study import evaluate, generated_gradients
from lab.figures import compression
from lab.scenario.names import SPARSIFIERS


@pytest.fixture(scope="module")
def rows():
    grad = torch.randn(2048, generator=torch.Generator().manual_seed(0))
    return evaluate(grad, ratios=(0.01, 0.1), group_size=256, repeats=1)


def test_error_against_density_one_line_per_compressor_in_percent(rows):
    fig = compression.density_error_figure(rows)
    kinds = list(dict.fromkeys(r["compressor"] for r in rows))
    assert len(fig.data) == len(kinds)
    for kind, t in zip(kinds, fig.data):
        rs = sorted((r for r in rows if r["compressor"] == kind), key=lambda r: r["density"])
        assert list(t.x) == [100 * r["density"] for r in rs] and list(t.y) == [100 * r["rel_error"] for r in rs]
        assert t.name == rs[0]["label"] and t.line.color == compression.COMPRESSOR_COLOURS[kind]
    assert "%" in fig.layout.xaxis.title.text and "%" in fig.layout.yaxis.title.text
    assert fig.layout.xaxis.type == "log"


def test_bytes_and_time_bars_label_the_ratio_of_sparsifiers_only(rows):
    by, tm = compression.bytes_figure(rows), compression.time_figure(rows)
    for r, label in zip(rows, by.data[0].y):
        assert (label == f"{r['label']} @ {r['ratio']:g}") if r["compressor"] in SPARSIFIERS \
            else (label == r["label"] and "@" not in label)
    assert list(tm.data[0].y) == list(by.data[0].y)
    assert list(by.data[0].x) == pytest.approx([r["bytes"] / 1e3 for r in rows])
    assert list(tm.data[0].x) == pytest.approx([1e3 * r["t_compress"] for r in rows])
    assert list(by.data[0].marker.color) == [compression.COMPRESSOR_COLOURS[r["compressor"]] for r in rows]
    assert "kB" in by.layout.xaxis.title.text and "kB" in by.data[0].hovertemplate
    assert "ms" in tm.layout.xaxis.title.text and "ms" in tm.data[0].hovertemplate


def test_fill_in_one_line_and_one_bound_per_block_bytes_per_hop_in_kb():
    grads = [g.numpy() for g in generated_gradients(4000, 3, 0)]
    fill, hops, sharing = sharing_report(grads, "group_topk", 0.01, 256, 0)
    fig = compression.fill_in_figure(fill, hops)
    blocks = sorted({r["block"] for r in fill})
    lines = [t for t in fig.data if t.name and t.name.startswith("block")]
    assert [t.name for t in lines] == [f"block {b}" for b in blocks]
    bounds = [t for t in fig.data if t.legendgroup == "bound"]
    assert len(bounds) == len(blocks) and [t.showlegend for t in bounds].count(True) == 1
    bars = fig.data[-1]
    assert list(bars.y) == pytest.approx([r["bytes"] / 1e3 for r in hops])
    assert list(bars.marker.color) == [compression.PHASE_COLOURS[r["phase"]] for r in hops]
    assert list(fig.layout.xaxis.categoryarray) == [r["hop"] for r in sorted(fill, key=lambda r: r["index"])
                                                    if r["block"] == blocks[0]]
    assert fig.layout.yaxis2.title.text == "kB"
    m = sharing["methods"]
    sb = compression.sharing_bytes_figure(m)
    assert list(sb.data[0].y) == pytest.approx([r["bytes_sent_mean"] / 1e3 for r in m])
    assert list(sb.data[1].y) == pytest.approx([r["bytes_sent_max"] / 1e3 for r in m])
    assert sb.data[0].text[0] == "100.0% of dense" and "(kB)" in sb.layout.yaxis.title.text


def test_cholesky_bars_in_kb_and_microseconds_and_the_error_map_is_centred():
    a = torch.randn(6, 6, generator=torch.Generator().manual_seed(1))
    crow = compare_methods(a @ a.T + torch.eye(6), repeats=1)
    fig = compression.cholesky_figure(crow)
    assert list(fig.data[0].x) == [r["method"] for r in crow]
    assert list(fig.data[0].y) == pytest.approx([r["bytes"] / 1e3 for r in crow])
    assert list(fig.data[1].y) == pytest.approx([1e6 * (r["t_pack"] + r["t_unpack"]) for r in crow])
    assert "µs" in fig.layout.yaxis2.title.text and "µs" in fig.data[1].hovertemplate
    true = np.array([[2.0, -1.0], [-1.0, 3.0]])
    heat = compression.factor_sum_figure(true, true + 0.5, workers=3)
    assert (heat.data[0].zmin, heat.data[0].zmax) == (-3.0, 3.0) and heat.data[1].z.tolist() == [[0.5] * 2] * 2
    assert "/ 3" in heat.layout.annotations[1].text


def test_grid_three_panels_per_variant_one_legend_entry_each():
    rows = [{"variant": v, "label": lab, "optimizer": o, "final_test_acc": 0.9, "s_per_step": 0.02,
             "bytes_per_worker_step": 5e4} for v, lab in (("dense", "dense (fp32 ring)"), ("gtk", "Group-TopK 1%"))
            for o in ("adam", "adabelief")]
    fig = compression.grid_figure(rows)
    assert len(fig.data) == 6 and [t.name for t in fig.data if t.showlegend is not False] == ["dense (fp32 ring)",
                                                                                              "Group-TopK 1%"]
    assert {t.marker.color for t in fig.data if t.legendgroup == "gtk"} == {compression.GRID_COLOURS["gtk"]}
    assert list(fig.data[0].y) == [90.0, 90.0] and list(fig.data[1].y) == [20.0, 20.0]
    assert list(fig.data[2].y) == [50.0, 50.0] and "(kB)" in fig.layout.yaxis3.title.text


def test_empty_inputs_give_figures_with_no_points():
    for fig in (compression.density_error_figure([]), compression.bytes_figure([]), compression.time_figure([]), compression.sharing_bytes_figure([]),
                compression.grid_figure([]), compression.fill_in_figure([], [])):
        assert fig.layout.title.text and all(len(t.x) == 0 for t in fig.data)
    assert len(compression.density_error_figure([]).data) == len(compression.grid_figure([]).data) == 0
