"""lab.figures.jobs: every job its own look, and a legend that covers no axis."""

from lab.figures.jobs import PALETTE, job_style, stages_figure, timeline_figure


def test_forty_jobs_all_look_different():
    rows = [{"job": f"j{i}", "resource": f"core {i % 2}", "start": i, "end": i + 1} for i in range(40)]
    fig = timeline_figure(rows)
    looks = {(t.marker.color, t.marker.pattern.shape or "") for t in fig.data}
    assert len(looks) == 40
    assert len(set(PALETTE)) == len(PALETTE) >= 30
    assert job_style(0) != job_style(len(PALETTE))  # the same colour again comes hatched


def test_legend_sits_above_the_plot_clear_of_the_axis_titles():
    fig = timeline_figure([{"job": "a", "resource": "core 0", "start": 0, "end": 1}])
    assert fig.layout.legend.yanchor == "bottom" and fig.layout.legend.y >= 1
    assert fig.layout.margin.t >= 80 and fig.layout.margin.b >= 40
    stages = stages_figure([])
    assert stages.layout.legend.yanchor == "bottom"
