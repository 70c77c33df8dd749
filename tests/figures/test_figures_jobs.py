"""lab.figures.jobs: every job its own look, and a legend that covers no axis."""

from lab.figures.jobs import LEGEND_ROW, PALETTE, job_style, legend_rows, events_figure, timeline_figure


def test_forty_jobs_all_look_different():
    rows = [{"job": f"j{i}", "resource": f"core {i % 2}", "start": i, "end": i + 1} for i in range(40)]
    fig = timeline_figure(rows)
    looks = {(t.marker.color, t.marker.pattern.shape or "") for t in fig.data}
    assert len(looks) == 40
    assert len(set(PALETTE)) == len(PALETTE) >= 30
    assert job_style(0) != job_style(len(PALETTE))  # the same colour again comes hatched


def test_the_title_and_the_legend_push_the_margins_and_cover_no_axis():
    # A wrapped title anchored to the top of the figure was cut off there (1024x768): it sits on the plot
    # and pushes the top margin; the legend sits at the figure's foot, under the x axis's title.
    one = timeline_figure([{"job": "a", "resource": "core 0", "start": 0, "end": 1}],
                          title="Which job held which of the local worker slots, when")
    title = one.layout.title
    assert (title.yref, title.yanchor, title.y, title.automargin) == ("paper", "bottom", 1, True)
    assert "<br>" in title.text  # wrapped for a narrow column
    legend = one.layout.legend
    assert (legend.yref, legend.yanchor, legend.y) == ("container", "bottom", 0) and one.layout.margin.b >= 40
    stages = events_figure([])
    assert stages.layout.legend.yref == "container" and stages.layout.title.automargin
    # the figure grows by the legend's rows, so the plot keeps its height
    rows = [{"job": f"j{i}", "label": f"a long job name number {i} (20250101-120000-ab12{i})", "resource": "core 0",
             "start": i, "end": i + 1} for i in range(8)]
    assert timeline_figure(rows).layout.height == one.layout.height + 8 * LEGEND_ROW
    assert legend_rows(["only one"]) == 0 and legend_rows(["A-1", "A-2", "B-1", "C-1", "B-2", "C-2"]) == 2
