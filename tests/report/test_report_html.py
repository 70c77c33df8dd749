"""lab.report: a view as one self-contained HTML file. Sections come out in the page's order with their badges,
user text as text everywhere (Markdown fields, notices, table cells, figure labels, settings), the figures' own
data, plotly.js packed once, no address asked for, under 5 MB."""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
from urllib.parse import urlencode

import pytest

from lab.errors import LabError
from lab.report import About, render
from lab.report.about import settings, version
from lab.report.html import markdown, table, withheld
from lab.report.link import check_link, check_out, safe_link
from lab.scenario.document import default_scenario
from lab.scenario.text import WITHHELD, Withheld
from lab.view.section import Notice, Section

HOSTILE = '<img src=x onerror=alert(1)> **bold** [link](http://evil.example) </script><script>alert(2)</script>'


def figures_of(page: str) -> list[dict]:
    found = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)
    return [json.loads(f) for f in json.loads(found.group(1))]


def about(link: str = "http://localhost:8501/placement?s=abc&v=def", **kw) -> About:
    return About(page="Placement", link=link, settings={"Model": "mlp"},
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


# ---- no script but the report's own -----------------------------------------------------------------------------
def script_src(page: str) -> list[str]:
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page).group(1)
    return re.search(r"script-src ([^;]*)", policy).group(1).split()


def sha256_source(code: str) -> str:
    import hashlib

    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode() + "'"


def test_the_policy_runs_only_the_reports_own_scripts_by_their_hashes():
    page = render(about(), sections())
    sources = script_src(page)
    assert "'unsafe-inline'" not in sources and "'unsafe-eval'" not in sources  # no WebGL figure here
    assert all(s.startswith("'sha256-") for s in sources), sources
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    run = [code for attrs, code in scripts if "type=" not in attrs]
    assert len(run) == 1 and "Plotly.newPlot" in run[0]  # the loader
    for code in run:
        assert sha256_source(code) in sources
    # the data blocks are of types a browser never runs; the plotly.js they unpack is allowed by its hash
    assert sorted(re.search(r'type="([^"]+)"', attrs).group(1) for attrs, _ in scripts if "type=" in attrs) == \
        ["application/gzip-base64", "application/json"]
    packed = re.search(r'id="plotly-gz">([^<]+)<', page).group(1)
    assert sha256_source(gzip.decompress(base64.b64decode(packed)).decode()) in sources
    assert len(sources) == 2


def test_a_webgl_figure_alone_brings_unsafe_eval_and_nothing_inline():
    regret = Section("regret", chart="optim.regret_figure", kind="measured", caption="regret",
                     chart_input={"avg_regret": {"adam": [1.0 / t for t in range(1, 300)]}, "labels": {"adam": "Adam"}})
    assert [t["type"] for f in figures_of(render(about(), [regret])) for t in f["data"]] == ["scattergl"]
    sources = script_src(render(about(), [regret]))
    assert "'unsafe-eval'" in sources and "'unsafe-inline'" not in sources


HOSTILE_LINKS = ["javascript:alert(1)", "JaVaScRiPt:alert(1)", " javascript:alert(1)", "\x01javascript:alert(1)",
                 "\tjavascript:alert(1)", "java\tscript:alert(1)", "data:text/html,<script>alert(1)</script>",
                 "file:///etc/passwd", "vbscript:msgbox(1)", "HTTP://localhost:8501/placement", " http://localhost/x",
                 "http:///placement", "https://", "http://localhost:8501@evil.example/placement",
                 "http://localhost/\u202ex", "http://local host/x", "//evil.example/placement", "placement?s=1", "",
                 "http://[::1"]


@pytest.mark.parametrize("link", HOSTILE_LINKS, ids=ascii)
def test_a_link_that_is_not_an_http_page_address_is_refused_and_left_out(link):
    with pytest.raises(LabError):
        check_link(link)
    assert safe_link(link) is None
    page = render(about(link=link), sections())
    head = page[:page.index("<main>")]
    assert "<a " not in head and "href" not in head
    assert "Reopen this view: left out: only an http or https address" in head
    assert "javascript:" not in page.lower() and "vbscript:" not in page.lower()


@pytest.mark.parametrize("link", ["http://localhost:8501/placement?s=abc&v=def", "https://lab.example.org/classroom",
                                  "http://127.0.0.1:8501/?s=x", "http://[::1]:8501/topology"])
def test_a_page_address_is_written_as_the_reopen_link(link):
    assert check_link(link) == link and safe_link(link) == link
    page = render(about(link=link), sections())
    assert f'Reopen this view: <a href="{html.escape(link)}">' in page


def test_a_report_made_from_a_scenario_link_with_a_script_link_has_no_script_href():
    from lab.report.about import about as facts

    sc = default_scenario()
    link = "javascript:alert(document.cookie)//http://localhost:8501/placement?" + urlencode({"s": sc.to_url_param()})
    page = render(facts("Placement", "placement", link, {"pl_model": "mlp"}, sc), sections())
    assert not [h for h in re.findall(r'href="([^"]*)"', page, re.I) if not h.startswith(("http://", "https://", "#"))]
    assert "javascript:" not in page and "<dd>mlp</dd>" in page


def test_the_command_line_checks_the_file_before_the_page_runs(tmp_path):
    assert check_out(tmp_path / "r.html") == tmp_path / "r.html"
    (tmp_path / "a-file").write_text("x")
    for bad, says in ((tmp_path / "missing" / "r.html", "does not exist"), (tmp_path / "a-file" / "r.html",
                      "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(LabError, match=says):
            check_out(bad)


# ---- the Class page's join code stays in the room ---------------------------------------------------------------
def without_plotly(page: str) -> str:
    """The report but its packed plotly.js, whose base64 holds any short run of letters and digits by chance."""
    return page.replace(re.search(r'id="plotly-gz">([^<]+)<', page).group(1), "")


def test_a_value_the_page_withholds_is_not_written_anywhere_in_a_section():
    secret = Withheld("K7P 2QX")
    s = Section("s", header="Code {c}", values={"c": secret}, notices=(Notice(secret),), table=[{"code": secret}],
                metrics=(("Join code", secret), ("Students joined", "3")))
    page = without_plotly(render(about(), [s]))
    assert "K7P" not in page and "2QX" not in page
    assert page.count(WITHHELD) == 4 and "Students joined" in page and ">3<" in page
    assert withheld(s).metrics == (("Join code", WITHHELD), ("Students joined", "3"))
    assert s.metrics[0][1] == "K7P 2QX" and isinstance(s.metrics[0][1], str)  # the page shows it as it was


def test_a_teachers_report_of_the_class_page_has_no_join_code(lab_db):
    from lab.store.runs import RunStore
    from lab.view import classroom
    from ui.lessons import LESSONS

    store = RunStore(lab_db)
    code = store.class_book.open_class().code
    store.class_book.join_class("a", code, "Ada")
    shown_on_page = classroom.teacher(LESSONS, store)
    metrics = dict(m[:2] for m in shown_on_page[0].metrics)
    assert metrics["Join code"] == " ".join(code) and metrics["Students joined"] == "1"  # the page shows it
    page = render(About(page="Class", link="http://localhost:8501/classroom"), shown_on_page)
    text = without_plotly(page)
    assert code not in text and " ".join(code) not in text and code.lower() not in text
    assert f'<div class="label">Join code</div><div class="value">{WITHHELD}</div>' in text
    assert "Ada" in text  # the rest of the page is as it was
