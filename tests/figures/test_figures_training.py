"""lab.figures.training: loss, accuracy and throughput curves from the run store's metric layout, where
each worker's time went (measured, with emulated waits hatched), and the one-line compression summary."""

import numpy as np
import pandas as pd
import pytest

from lab.figures.style import OPTIMIZER_COLOURS
from lab.figures.training import (PALETTE, accuracy_figure, compression_summary, loss_figure, throughput_figure,
                                  time_split_figure, time_split_table)

JOB = pd.DataFrame({"step": [1, 2, 3, 4, 5], "worker": -1, "loss": [2.3, 1.9, 1.5, np.nan, 1.0],
                    "test_acc": [np.nan, 0.5, np.nan, 0.7, 0.8], "wall": [0.1, 0.2, 0.3, 0.4, 0.5],
                    "samples_per_s": [100.0, 110.0, 120.0, 130.0, 140.0]})
PARTS = ["t_compute", "t_emul_compute", "t_comm", "t_emul_comm", "t_compress", "t_idle"]


def per_worker(emulated: bool) -> pd.DataFrame:
    """Two workers, two steps each, seconds per step."""
    df = pd.DataFrame({"step": [1, 2, 1, 2], "worker": [0, 0, 1, 1], "t_compute": [0.5, 0.5, 0.3, 0.3],
                       "t_comm": [0.2, 0.2, 0.1, 0.1], "t_compress": [0.01] * 4, "t_idle": [0.0, 0.0, 0.2, 0.2],
                       "t_emul_compute": [0.0] * 4, "t_emul_comm": [0.0] * 4})
    return df.assign(t_emul_compute=[0.2, 0.2, 0.0, 0.0], t_emul_comm=[0.05] * 4) if emulated else df


def test_one_curve_per_run_gaps_dropped_optimiser_colours_and_units():
    fig = loss_figure({"adam run": JOB, "other": JOB}, colour_keys={"adam run": "adam"})
    assert [t.name for t in fig.data] == ["adam run", "other"]
    assert list(fig.data[0].x) == [1, 2, 3, 5] and list(fig.data[0].y) == [2.3, 1.9, 1.5, 1.0]
    assert fig.data[0].line.color == OPTIMIZER_COLOURS["adam"] and fig.data[1].line.color == PALETTE[1]
    assert fig.data[0].mode == "lines+markers"
    assert fig.layout.xaxis.title.text == "step (count)" and "nats" in fig.layout.yaxis.title.text
    long = pd.DataFrame({"step": range(50), "loss": np.linspace(2, 1, 50)})
    assert loss_figure({"long": long}).data[0].mode == "lines"
    assert len(loss_figure({}).data) == 0


def test_accuracy_in_percent_against_wall_time_and_throughput_in_samples_per_second():
    fig = accuracy_figure({"r": JOB}, x="wall")
    assert list(fig.data[0].x) == [0.2, 0.4, 0.5] and list(fig.data[0].y) == pytest.approx([50.0, 70.0, 80.0])
    assert tuple(fig.layout.yaxis.range) == (0, 100) and fig.layout.xaxis.title.text == "wall time (s)"
    assert "(%)" in fig.layout.yaxis.title.text
    tp = throughput_figure({"r": JOB})
    assert list(tp.data[0].y) == JOB.samples_per_s.tolist() and "samples/s" in tp.layout.yaxis.title.text


@pytest.mark.parametrize("emulated", [False, True])
def test_time_split_sums_each_workers_seconds_without_losing_any(emulated):
    per = per_worker(emulated)
    tab = time_split_table(per)
    sums = per.groupby("worker")[PARTS].sum()
    total = sums.t_compute + sums.t_comm + sums.t_compress + sums.t_idle
    assert tab.sum(axis=1).tolist() == pytest.approx(total.tolist())
    assert tab["device wait (emulated)"].tolist() == pytest.approx(sums.t_emul_compute.tolist())
    assert tab["communication (measured)"].tolist() == pytest.approx((sums.t_comm - sums.t_emul_comm).tolist())


def test_time_split_figure_hatches_only_emulated_waits_and_leaves_them_out_without_emulation():
    plain = time_split_figure(per_worker(False), {0: "worker 0 (cpu)", 1: "parameter server"})
    assert all("(measured)" in t.name and not t.marker.pattern.shape for t in plain.data)
    assert plain.data[0].y == ("worker 0 (cpu)", "parameter server") and plain.data[0].x == pytest.approx((1.0, 0.6))
    assert plain.layout.barmode == "stack" and "(s" in plain.layout.xaxis.title.text
    assert all(" s<extra>" in t.hovertemplate for t in plain.data)
    emu = time_split_figure(per_worker(True))
    hatched = [t for t in emu.data if t.marker.pattern.shape == "/"]
    assert [t.name for t in hatched] == ["device wait (emulated)", "link wait (emulated)"]
    assert emu.data[0].y == ("worker 0", "worker 1")
    colour = {t.name: t.marker.color for t in emu.data}
    assert colour["device wait (emulated)"] == colour["compute (measured)"]
    assert colour["link wait (emulated)"] == colour["communication (measured)"]


@pytest.mark.parametrize("comp, expected", [
    ({"kind": "none", "ratio": 0.5}, "no compression"),
    ({}, "no compression"),
    ({"kind": "group_topk", "ratio": 0.01, "group_size": 1024, "error_feedback": True, "sharing": "sparse_allgather"},
     "Group-TopK, 1 % per group of 1024, with error feedback, shared by sparse all-gather"),
    ({"kind": "topk", "ratio": 0.05, "sharing": "sparse_ring"},
     "global Top-K, 5 % of all entries, without error feedback, shared by sparse ring"),
    ({"kind": "fp16", "ratio": 1.0, "sharing": "dense"},
     "FP16, every entry at half precision, without error feedback, shared by dense ring all-reduce"),
])
def test_compression_summary_names_kind_amount_feedback_and_sharing(comp, expected):
    assert compression_summary(comp) == expected


def test_a_link_wait_that_overlapped_the_idle_wait_is_counted_once():
    # The emulated link wait is part of the collective (communication + idle): 0.25 s of it against
    # 0.1 s of communication overlapped 0.15 s of the idle wait, which must not be shown twice.
    one = pd.DataFrame({"step": [1], "worker": [0], "t_compute": [0.5], "t_emul_compute": [0.0], "t_comm": [0.1],
                        "t_emul_comm": [0.25], "t_compress": [0.0], "t_idle": [0.2]})
    tab = time_split_table(one)
    assert tab.sum(axis=1).tolist() == pytest.approx([0.8])
    assert tab["link wait (emulated)"].tolist() == pytest.approx([0.25])
    assert tab["idle, waiting for the slowest (measured)"].tolist() == pytest.approx([0.05])
    assert tab["communication (measured)"].tolist() == pytest.approx([0.0])
