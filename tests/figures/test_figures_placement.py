"""The Gantt chart's caption and the balancing loop's time unit (lab.view.placement.tables, beside the figures
they go with), and lab.figures.placement's operator graph on a projector."""

from __future__ import annotations

from types import SimpleNamespace

from lab.figures import placement as figs
from lab.view.placement import tables


def test_gantt_caption_names_the_visibility_threshold():
    assert figs.MIN_VISIBLE == 0.006  # what the Gantt chart draws by, and its caption says
    assert tables.gantt_caption() == (
        "each bar is an operator on a device, from its start to its finish (hover: its class and why it is there); "
        "the red lane under a device holds the transfers arriving there. Bars shorter than 0.6 % of the time axis "
        "carry a diamond so they stay visible. Gaps are waiting (for inputs or for the device).")


def _res(*times: float) -> SimpleNamespace:
    return SimpleNamespace(rounds=[SimpleNamespace(round_time=t) for t in times])


def test_balance_time_unit_follows_the_longest_round_of_any_rule():
    assert tables.balance_time_unit({"wait": _res(0.002, 0.004), "throughput": _res(0.003)}) == (1e3, "ms")
    assert tables.balance_time_unit({"wait": _res(2e-6), "throughput": _res(5.0, 1e-3)}) == (1.0, "s")
    assert tables.balance_time_unit({"wait": _res(3e-5)}) == (1e6, "µs")


# ----- the operator graph on a projector: a window 1024 pixels wide ------------------------------------------

def _residual_net(blocks: int = 7) -> tuple[list[str], list[tuple[str, str]]]:
    """A 28-operator network shaped like the ResNet preset, with torch.fx's long names: a stem, then blocks of
    conv, norm, relu and an add that also takes the block's input, then a classifier."""
    tasks, edges = ["stem_conv"], []
    last = "stem_conv"
    for b in range(blocks):
        conv, bn, relu, add = (f"layers_{b}_residual_conv1", f"layers_{b}_residual_bn1", f"layers_{b}_relu",
                               f"add_{b}")
        tasks += [conv, bn, relu]
        edges += [(last, conv), (conv, bn), (bn, relu)]
        if b % 3 == 2:  # now and then a block without a shortcut, so not every add lines up
            last = relu
            continue
        tasks.append(add)
        edges += [(relu, add), (last, add)]
        last = add
    tasks.append("classifier_fc")
    edges.append((last, "classifier_fc"))
    return tasks, edges


def _wide_net() -> tuple[list[str], list[tuple[str, str]]]:
    """28 operators where one input fans out into four branches of six (an inception-like layer) and back."""
    tasks, edges = ["input_projection"], []
    for b in range(4):
        prev = "input_projection"
        for k in range(6):
            t = f"branch_{b}_step_{k}_conv"
            tasks.append(t)
            edges.append((prev, t))
            prev = t
        edges.append((prev, "concatenate"))
    tasks += ["concatenate", "classifier_head", "softmax_output"]
    edges += [("concatenate", "classifier_head"), ("classifier_head", "softmax_output")]
    return tasks, edges


def _boxes(fig, width_px: float) -> tuple[list[tuple], list[tuple]]:
    """Each label's and each marker's box in pixels (left, top, right, bottom) as the figure draws it ``width_px``
    wide: a label of ``DAG_CHAR_PX`` a character centred above its marker, from the axes' ranges and the margins."""
    import html

    lay = fig.layout
    (x0, x1), (y0, y1) = lay.xaxis.range, lay.yaxis.range
    left, top = lay.margin.l, lay.margin.t
    w, h = width_px - lay.margin.l - lay.margin.r, lay.height - lay.margin.t - lay.margin.b

    def px(x, y):
        return left + (x - x0) / (x1 - x0) * w, top + (y1 - y) / (y1 - y0) * h

    labels, markers = [], []
    r = figs.DAG_MARKER_PX / 2
    for tr in fig.data:
        if tr.mode != "markers+text":
            continue
        for x, y, text in zip(tr.x, tr.y, tr.text):
            cx, cy = px(x, y)
            half = figs.DAG_CHAR_PX * len(html.unescape(text)) / 2
            labels.append((cx - half, cy - r - 2 - 1.25 * figs.DAG_FONT_PX, cx + half, cy - r - 2))
            markers.append((cx - r, cy - r, cx + r, cy + r))
    return labels, markers


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def assert_labels_apart(fig, width_px: float = figs.DAG_WIDTH_PX) -> None:
    """No label of the operator graph ``fig`` overlaps another label or another operator's marker, and none runs
    off the figure's sides, when it is drawn ``width_px`` wide."""
    labels, markers = _boxes(fig, width_px)
    clashes = [(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels)) if _overlap(labels[i], labels[j])]
    assert clashes == []
    assert [(i, j) for i, a in enumerate(labels) for j, m in enumerate(markers) if i != j and _overlap(a, m)] == []
    assert all(b[0] >= 0 and b[2] <= width_px for b in labels)


def _assert_readable(tasks, edges, width_px=figs.DAG_WIDTH_PX):
    devices = ["host cpu", "gpu", "fpga"]
    fig = figs.dag_figure(tasks, edges, {t: devices[i % 3] for i, t in enumerate(tasks)}, devices,
                          title="Operator graph coloured by device", width_px=width_px)
    assert sum(len(tr.text) for tr in fig.data if tr.mode == "markers+text") == len(tasks)
    assert_labels_apart(fig, width_px)
    return fig


def test_no_two_labels_of_a_28_operator_network_overlap_at_the_width_of_a_1024_pixel_window():
    for tasks, edges in (_residual_net(), _wide_net()):
        assert len(tasks) == 28
        _assert_readable(tasks, edges)
    # the layout it replaces (a column per depth across one line) crowds 28 columns of labels into this width
    tasks, _ = _residual_net()
    assert len(tasks) * figs.DAG_CHAR_PX * 8 > figs.DAG_WIDTH_PX


def test_a_long_graph_wraps_into_bands_and_the_figure_grows_with_them():
    short = _assert_readable(*_residual_net(2))
    long = _assert_readable(*_residual_net(30))
    assert figs.dag_layout(*_residual_net(30))["columns"] <= figs.dag_layout(*_residual_net(2))["columns"]
    assert len(figs.dag_layout(*_residual_net(30))["gaps"]) > len(figs.dag_layout(*_residual_net(2))["gaps"])
    assert long.layout.height > 3 * short.layout.height


def test_an_operator_sits_right_of_its_inputs_in_its_band_or_in_a_later_band():
    tasks, edges = _residual_net()
    lay = figs.dag_layout(tasks, edges)
    for u, v in edges:
        assert (lay["band"][u], lay["pos"][u][0]) < (lay["band"][v], lay["pos"][v][0])


def test_a_long_name_is_cut_to_its_end_and_the_hover_keeps_it_whole():
    assert figs.short_label("blocks_0_conv1") == "blocks_0_conv1"
    assert figs.short_label("net_encoder_layers_encoder_layer_0_mlp_0") == "…layer_0_mlp_0"
    assert figs.short_label("net_encoder_layers_encoder_layer_0_self_attention") == "…attention"  # a word's start
    assert figs.short_label("x" * 40) == "…" + "x" * 13
    assert all(len(figs.short_label("ab_" * k)) <= figs.DAG_LABEL_CHARS for k in range(30))
    name = "net_encoder_layers_encoder_layer_0_<b>mlp</b>"
    fig = figs.dag_figure([name, "head"], [(name, "head")], {name: "gpu", "head": "gpu"}, ["gpu"],
                          {name: "matmul, 1 GFLOP"})
    node = next(tr for tr in fig.data if tr.mode == "markers+text")
    assert node.text[0] == "…0_&lt;b&gt;mlp&lt;/b&gt;" and "<b>" not in node.text[0]  # cut, then shown as text
    assert node.hovertext[0].startswith("<b>net_encoder_layers_encoder_layer_0_&lt;b&gt;mlp&lt;/b&gt;</b> on gpu")
