"""A view as one self-contained HTML file: the page's sections (the same page model and figure builders the page
draws), every figure's measured / modelled / emulated badge, the settings that made them, the machine they were
measured on with its load, the lab's version, and the link that reopens the view.

Opened, the file asks no other address for anything: plotly.js travels inside it, gzip-compressed (it is most
of the file's size) and unpacked by the browser's own DecompressionStream, then every figure is drawn from its
JSON. A print style sheet keeps sections whole and figures within the page, so it prints to PDF from a browser.

Text is made safe once: the lab's Markdown goes through markdown-it with raw HTML off, user values in it through
:func:`lab.scenario.text.plain`, and notices, settings, table cells and machine details through ``html.escape``.
The one link, the one that reopens the view, is written only when it is an http or https address
(:func:`lab.report.link.safe_link`); a value a page marks :class:`~lab.scenario.text.Withheld` (the Class page's
join code) is not written at all.

The Content-Security-Policy runs no script but the report's own: each inline script the report writes, and
plotly.js as the loader unpacks it, is allowed by its SHA-256 hash, and nothing else.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import gzip
import hashlib
import html
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping

from lab.figures import build
from lab.report.link import safe_link
from lab.scenario.text import WITHHELD, Withheld
from lab.view.section import Notice, Section, filled

KIND_TEXT = {"measured": "measured", "modelled": "modelled", "emulated": "emulated"}
_BADGE = re.compile(r":(\w+)-badge\[(?::material/[\w-]+:\s*)?([^\]]*)\]")
_ICON = re.compile(r":material/[\w-]+:\s*")
_COLOUR = re.compile(r":(?:red|orange|green|blue|violet|gray|grey|rainbow|primary)\[([^\]]*)\]")
_TOKEN = "\ue000{}\ue001"  # a private-use mark markdown-it passes through untouched


@dataclass(frozen=True)
class About:
    """What the report says about itself: the page, the link that reopens the view, the settings that made it,
    the machine and its load, the lab's version."""

    page: str
    link: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    scenario_json: str = ""
    machine: Mapping[str, Any] = field(default_factory=dict)
    version: str = ""
    created: str = ""


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")


def markdown(text: str) -> str:
    """The lab's Markdown (with Streamlit's badges, colours and icons) as HTML; raw HTML in it stays text."""
    badges: list[tuple[str, str]] = []

    def keep(m: re.Match) -> str:
        badges.append((m.group(1), m.group(2)))
        return _TOKEN.format(len(badges) - 1)

    text = _COLOUR.sub(r"\1", _ICON.sub("", _BADGE.sub(keep, text)))
    out = _markdown().render(text)
    for i, (colour, label) in enumerate(badges):
        out = out.replace(_TOKEN.format(i), f'<span class="badge {html.escape(colour)}">{html.escape(label)}</span>')
    return out


def _inline(text: str) -> str:
    """Markdown of one line (a header, a caption) without its paragraph."""
    out = markdown(text).strip()
    return out[3:-4] if out.startswith("<p>") and out.endswith("</p>") else out


def _cell(value: Any, column: Mapping[str, Any], missing: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return html.escape(missing)
    fmt = column.get("format")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(fmt, str) and "%" in fmt:
        try:
            return html.escape(fmt % value)
        except (TypeError, ValueError):
            pass
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    return html.escape(str(value))


def table(rows: list[dict], columns: Mapping[str, Mapping[str, Any]] | None, missing: str | None) -> str:
    """A section's table as an HTML table, each cell as text, columns named and formatted as the page shows them."""
    columns = columns or {}
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    keys = [k for k in keys if columns.get(k, {}).get("hidden") is not True]
    head = "".join(f"<th>{html.escape(str(columns.get(k, {}).get('label') or k))}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(k), columns.get(k, {}), missing or '–')}</td>" for k in keys)
                   + "</tr>" for r in rows)
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _badge(kind: str) -> str:
    return f'<span class="badge kind-{kind}">{KIND_TEXT[kind]}</span>'


def _kept(value: Any) -> Any:
    return WITHHELD if isinstance(value, Withheld) else value


def withheld(s: Section) -> Section:
    """``s`` with every :class:`Withheld` value in its text, values, notices, table cells and metrics replaced by
    :data:`WITHHELD`."""
    return dataclasses.replace(
        s, header=_kept(s.header), intro=_kept(s.intro), caption=_kept(s.caption), text=_kept(s.text),
        values={k: _kept(v) for k, v in s.values.items()},
        notices=tuple(Notice(_kept(n.text), n.level, n.icon) for n in s.notices),
        table=None if s.table is None else [{k: _kept(v) for k, v in r.items()} for r in s.table],
        metrics=tuple(tuple(_kept(x) for x in m) for m in s.metrics))


def section_html(s: Section, figures: list[str]) -> str:
    """One section in the page's order: header, intro, notices, figure, table, caption with its badge, text,
    metrics. A figure goes into ``figures`` as JSON, drawn when plotly.js is unpacked."""
    s = withheld(s)
    parts = [f'<section class="section" id="{html.escape(s.key)}">']
    if s.header:
        tag = "h3" if s.level == "subheader" else "h2"
        parts.append(f"<{tag}>{_inline(filled(s, s.header))}</{tag}>")
    if s.intro:
        parts.append(markdown(filled(s, s.intro)))
    for n in s.notices:
        parts.append(f'<div class="notice {html.escape(n.level)}">{html.escape(n.text)}</div>')
    fig = build(s.chart, s.chart_input)
    if fig is not None:
        figures.append(fig.to_json())
        badge = _badge(s.kind) if s.kind else ""
        parts.append(f'<figure>{badge}<div class="plot" id="fig{len(figures) - 1}"></div></figure>')
    if s.table is not None:
        parts.append(table(list(s.table), s.columns, s.missing))
    if s.caption:
        parts.append(f'<p class="caption">{_badge(s.kind) + " " if s.kind else ""}{_inline(filled(s, s.caption))}</p>')
    if s.text:
        parts.append(markdown(filled(s, s.text)))
    if s.metrics:
        cells = "".join(f'<div class="metric"><div class="label">{html.escape(str(label))}</div>'
                        f'<div class="value">{html.escape(str(value))}</div></div>' for label, value, *_ in s.metrics)
        parts.append(f'<div class="metrics">{cells}</div>')
    parts.append("</section>")
    return "\n".join(parts)


@lru_cache(maxsize=1)
def _plotly() -> tuple[str, str]:
    """(plotly.js gzip-compressed in base64, the CSP hash of plotly.js as the loader runs it)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    return base64.b64encode(gzip.compress(js.encode(), 9, mtime=0)).decode(), script_hash(js)


def _plotly_packed() -> str:
    return _plotly()[0]


def script_hash(code: str) -> str:
    """The CSP source that allows the inline script ``code``: its UTF-8 text's SHA-256, in base64."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode() + "'"


# Traces plotly.js draws with WebGL through regl, which compiles each draw command into a function with
# ``new Function``: without 'unsafe-eval' such a figure keeps its axes and loses its lines, with no error (measured
# in Chromium: a Scattergl line, as the Optimisers page draws, is not drawn). SVG traces (bars, scatter, heatmaps,
# the Gantt rows) never evaluate a string.
EVAL_TRACES = frozenset({"scattergl", "scatterpolargl", "splom", "parcoords", "heatmapgl", "pointcloud",
                         "scatter3d", "surface", "mesh3d", "cone", "streamtube", "isosurface", "volume"})


def needs_eval(figures: Iterable[str]) -> bool:
    """Whether any figure (plotly JSON) holds a trace that plotly.js draws only with ``eval``."""
    return any(t.get("type") in EVAL_TRACES for f in figures for t in json.loads(f).get("data") or ())


def csp(hashes: Iterable[str], *, allow_eval: bool = False) -> str:
    """The report's Content-Security-Policy: nothing is fetched, and the only scripts that run are those whose
    :func:`script_hash` is in ``hashes``; 'unsafe-eval' only with ``allow_eval``, for a report whose figures
    need it (:data:`EVAL_TRACES`)."""
    sources = " ".join([*dict.fromkeys(hashes), *(["'unsafe-eval'"] if allow_eval else [])])
    return (f"default-src 'none'; script-src {sources}; style-src 'unsafe-inline'; img-src data:; font-src data:; "
            "base-uri 'none'; form-action 'none'")


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 1rem 1.5rem; color: #1f2328; line-height: 1.45; }
header.report { border-bottom: 2px solid #d0d7de; margin-bottom: 1rem; }
h1 { margin: 0.2rem 0; } h2 { margin-top: 1.6rem; } h3 { margin-top: 1.2rem; }
.badge { display: inline-block; border-radius: 0.6rem; padding: 0 0.5rem; font-size: 0.8rem; font-weight: 600;
         margin-right: 0.3rem; background: #eaeef2; }
.kind-measured, .badge.green { background: #dafbe1; color: #116329; }
.kind-modelled, .badge.blue { background: #ddf4ff; color: #0550ae; }
.kind-emulated, .badge.orange { background: #fff1e5; color: #953800; }
.badge.red { background: #ffebe9; color: #a40e26; } .badge.violet { background: #fbefff; color: #6e40c9; }
.notice { border-left: 4px solid #0969da; background: #f6f8fa; padding: 0.4rem 0.8rem; margin: 0.5rem 0;
          white-space: pre-wrap; }
.notice.warning { border-color: #bf8700; } .notice.error { border-color: #cf222e; }
.notice.success { border-color: #1a7f37; }
figure { margin: 0.5rem 0; } .plot { width: 100%; min-height: 320px; }
.caption { color: #57606a; font-size: 0.9rem; }
.table { overflow-x: auto; } table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #d0d7de; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
.metrics { display: flex; flex-wrap: wrap; gap: 1.5rem; } .metric .label { color: #57606a; font-size: 0.85rem; }
.metric .value { font-size: 1.4rem; }
dl.about { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 1rem; font-size: 0.9rem; }
dl.about dt { color: #57606a; } dl.about dd { margin: 0; overflow-wrap: anywhere; }
.link { overflow-wrap: anywhere; font-size: 0.8rem; }
@page { size: A4; margin: 12mm; }
@media print {
  body { max-width: none; padding: 0; }
  .section { break-inside: avoid-page; }
  figure, .plot { break-inside: avoid; }
  .plot { width: 100% !important; }
  .table { overflow: visible; } table { font-size: 8pt; width: 100%; table-layout: auto; }
  td, th { overflow-wrap: anywhere; }
  details { display: block; } details > summary { display: none; }
  details pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 7pt; }
}
"""

# Unpacks plotly.js with the browser's own gzip, runs it, then draws every figure; nothing is fetched.
PRINT_WIDTH = 680  # CSS pixels: a figure's width on paper, inside A4's or Letter's printable width

_LOADER = """
const PRINT_WIDTH = %d;
(async () => {
  const packed = document.getElementById("plotly-gz").textContent.trim();
  const bytes = Uint8Array.from(atob(packed), c => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const code = await new Response(stream).text();
  const s = document.createElement("script");
  s.textContent = code;
  document.head.appendChild(s);
  const figs = JSON.parse(document.getElementById("figures").textContent);
  for (let i = 0; i < figs.length; i++) {
    const f = JSON.parse(figs[i]);
    const layout = Object.assign({}, f.layout || {}, {autosize: true});
    delete layout.width;
    await Plotly.newPlot("fig" + i, f.data || [], layout, {displayModeBar: false, responsive: true, staticPlot: false});
  }
  // Printed, a figure takes the width of a page (A4 or Letter at 12 mm margins is 700 CSS pixels or more):
  // Plotly keeps the width it was drawn at, which would be cut off at the page's edge.
  const plots = () => Array.from(document.querySelectorAll(".plot.js-plotly-plot"));
  const toPrint = printing => plots().forEach(el => printing
    ? Plotly.relayout(el, {width: PRINT_WIDTH, autosize: false})
    : Plotly.relayout(el, {width: null, autosize: true}));
  window.addEventListener("beforeprint", () => toPrint(true));
  window.addEventListener("afterprint", () => toPrint(false));
  window.matchMedia("print").addEventListener("change", m => toPrint(m.matches));
  document.body.dataset.drawn = String(figs.length);
})().catch(e => {
  document.body.dataset.drawn = "error";
  const el = document.getElementById("report-error");
  el.style.display = "block";
  el.textContent = "The figures could not be drawn in this browser: " + e;
});
"""


def _dl(items: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(_shown(v))}</dd>" for k, v in items)
    return f'<dl class="about">{rows}</dl>'


def _shown(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)
    return "–" if v is None else str(v)


def render(about: About, sections: Iterable[Section]) -> str:
    """The report of a view: ``sections`` as the page shows them, with what ``about`` says."""
    figures: list[str] = []
    body = "\n".join(section_html(s, figures) for s in sections)
    created = about.created or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = dict(about.machine)
    head_facts = [("Page", about.page), ("Made", created), ("Lab version", about.version or "–")]
    link = safe_link(about.link)
    reopen = (f'<a href="{html.escape(link, quote=True)}">{html.escape(link)}</a>' if link is not None else
              "left out: only an http or https address is written into a report")
    loader = _LOADER % PRINT_WIDTH
    # JSON inside <script type="application/json">: "</" would end the script element early
    figs_json = json.dumps(figures).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{csp([script_hash(loader), _plotly()[1]], allow_eval=needs_eval(figures))}">
<title>{html.escape(about.page)} – heterogeneous training lab report</title>
<style>{_STYLE}</style></head>
<body data-drawn="0">
<header class="report"><h1>{html.escape(about.page)}</h1>
<p>A report of the heterogeneous training lab: what the page showed, with each figure's badge saying whether it
is <span class="badge kind-measured">measured</span> on the machine below, <span class="badge kind-modelled">modelled</span>
or <span class="badge kind-emulated">emulated</span>.</p>
{_dl(head_facts)}
<p class="link">Reopen this view: {reopen}</p>
<p id="report-error" class="notice error" style="display:none"></p>
<noscript><p class="notice warning">The figures need JavaScript; the tables and text are complete without it.</p></noscript>
</header>
<main>
{body}
</main>
<footer>
<h2>The settings that made this view</h2>
{_dl(about.settings.items())}
<details><summary>The whole scenario (JSON)</summary><pre>{html.escape(about.scenario_json)}</pre></details>
<h2>The machine it was measured on</h2>
{_dl(machine.items())}
</footer>
<script type="application/gzip-base64" id="plotly-gz">{_plotly_packed()}</script>
<script type="application/json" id="figures">{figs_json}</script>
<script>{loader}</script>
</body></html>
"""


__all__ = ["About", "render", "markdown", "table", "section_html", "withheld", "script_hash", "csp",
           "needs_eval", "EVAL_TRACES"]
