"""lab.report: a view as one self-contained HTML file. Sections come out in the page's order with their badges,
user text as text everywhere (Markdown fields, notices, table cells, figure labels, settings), the figures' own
data, plotly.js packed once, no address asked for, under 5 MB."""

from __future__ import annotations

import base64
import gzip
import json
import re

from lab.report import About, render
from lab.report.about import settings, version
from lab.report.html import markdown, table
from lab.scenario.document import default_scenario
from lab.view.section import Notice, Section

HOSTILE = '<img src=x onerror=alert(1)> **bold** [link](http://evil.example) </script><script>alert(2)</script>'


def figures_of(page: str) -> list[dict]:
    found = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)
    return [json.loads(f) for f in json.loads(found.group(1))]


def about(**kw) -> About:
    return About(page="Placement", link="http://localhost:8501/placement?s=abc&v=def", settings={"Model": "mlp"},
                 scenario_json=default_scenario().to_json(), machine={"cpu": "test cpu", "cores": 2}, **kw)


def sections() -> list[Section]:
    return [
        Section("first", header="The plan of {name}", values={"name": HOSTILE}, intro="**Lab** text with a "
                ":blue-badge[:material/functions: modelled] badge and :material/info: an icon.",
                notices=(Notice(HOSTILE, "warning"),)),
        Section("second", header="Numbers", level="subheader", table=[{"op": HOSTILE, "ms": 1.23456, "gone": None}],
                columns={"ms": {"kind": "number", "label": "time (ms)", "format": "%.2f"}}, missing="–",
                metrics=(("Makespan (ms)", "71.2"),)),
        Section("third", chart="placement.usage_figure", chart_input={"rows": [{"device": "gpu", "busy": 1.0,
                "idle": 0.5}], "makespan": 1.5}, kind="measured",
                caption="Measured on {name}", values={"name": HOSTILE}),
    ]


def test_sections_come_in_order_with_their_badges_and_user_text_stays_text():
    page = render(about(), sections())
    assert page.index('id="first"') < page.index('id="second"') < page.index('id="third"')
    body = page[page.index("<main>"):page.index("</main>")]
    assert "<img" not in body and "<script>alert" not in body and 'href="http://evil' not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body  # the notice and the table cell, as text
    assert "**bold**" in body  # a user's Markdown in a {name} field is not rendered
    assert "<strong>Lab</strong>" in body  # the lab's own Markdown is
    assert '<span class="badge blue">modelled</span>' in body and ":material/" not in body
    assert '<span class="badge kind-measured">measured</span>' in body  # the figure's and its caption's badge
    assert "<th>time (ms)</th>" in body and "<td>1.23</td>" in body and "<td>–</td>" in body
    assert "Makespan (ms)" in body and "71.2" in body


def test_nothing_is_fetched_plotly_travels_packed_once_and_the_report_is_small():
    page = render(about(), sections())
    assert not re.search(r'(src|href)="(?!#)(?!http://localhost:8501/placement\?s=abc&amp;v=def)', page)
    assert "default-src 'none'" in page  # the page itself forbids asking any address
    packed = re.search(r'id="plotly-gz">([^<]+)<', page).group(1)
    js = gzip.decompress(base64.b64decode(packed)).decode()
    assert js.startswith("/**") and "plotly.js" in js[:400]
    assert page.count('id="plotly-gz"') == 1
    assert len(page.encode()) < 5e6


def test_a_figures_data_is_the_builders_and_a_user_label_cannot_end_the_script():
    from lab.figures import build

    rows = [{"job": HOSTILE, "resource": "slot 1", "start": 0.0, "end": 2.0}]
    s = Section("jobs", chart="jobs.timeline_figure", chart_input={"rows": rows}, kind="measured", caption="slots")
    page = render(about(), [s])
    assert page.count("</script>") == 3  # the packed plotly.js, the figures, the loader: no label ended one
    got = figures_of(page)
    want = json.loads(build(s.chart, s.chart_input).to_json())
    assert got == [want]


def test_the_lab_markdown_converter_keeps_raw_html_as_text():
    out = markdown("a <b>tag</b> and `code` and **bold**")
    assert "&lt;b&gt;tag&lt;/b&gt;" in out and "<code>code</code>" in out and "<strong>bold</strong>" in out
    assert "<td>&lt;i&gt;</td>" in table([{"x": "<i>"}], None, None)


def test_the_settings_name_the_pages_controls_and_what_the_scenario_changed():
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(model="resnet18", steps=7))
    got = settings("placement", {"pl_model": "vit_small"}, sc)
    assert got["Model (pl_model)"] == "vit_small"
    assert got["training.model"] == "resnet18" and got["training.steps"] == 7
    assert "training.lr" not in got  # unchanged from the defaults
    assert not any("(topo_" in k for k in got)  # another page's controls
    assert version().startswith("0.")
