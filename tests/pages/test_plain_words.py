"""Plain words: nothing a person reads names the source designs by letter or by step label, and the
About page names each claim with the page that tests it."""

import re

import pytest

from app import ROOT, available_pages
from tests.conftest import app_test, assert_no_exception

JARGON = re.compile(r"\b[Ss]eed [A-D]\b|\bseed's\b|\bS[1-6]\b|S3[–-]S6")
PAGES = [f for f, _, _ in available_pages()]


def shown_text(at) -> list[str]:
    """Every text the page shows: prose, captions, headings, messages, widget labels, help and options."""
    out = []
    for kind in ("markdown", "caption", "title", "header", "subheader", "info", "success", "warning", "error",
                 "latex"):
        out += [e.value for e in getattr(at, kind)]
    for kind in ("selectbox", "multiselect", "radio", "slider", "select_slider", "number_input", "checkbox",
                 "toggle", "button", "text_input"):
        for w in getattr(at, kind):
            out.append(str(getattr(w, "label", "")))
            out.append(str(getattr(w, "help", "") or ""))
            for opt in getattr(w, "options", []) or []:
                out.append(str(opt))
    for df in at.dataframe:
        out += [str(c) for c in df.value.columns]
        out += [str(v) for v in df.value.select_dtypes("object").to_numpy().ravel()]
    return out


@pytest.mark.parametrize("page", PAGES)
def test_no_page_names_a_design_by_letter_or_step_label(page, spawns):
    at = app_test(page, timeout=120)
    assert_no_exception(at)
    found = [t for t in shown_text(at) if JARGON.search(t)]
    assert not found, found


def test_lesson_texts_and_example_files_use_plain_words():
    for path in list((ROOT / "assets").rglob("*.json")) + list((ROOT / "assets").rglob("*.md")):
        text = path.read_text()
        assert not JARGON.search(text), (path.name, JARGON.search(text).group(0))


def test_about_page_links_every_claim_to_a_page_of_this_lab(spawns):
    at = app_test("pages/about.py")
    assert_no_exception(at)
    from lab.view.about import DESIGNS

    assert len(at.subheader) == 4
    linked = {where for _, _, claims in DESIGNS for _, where, *_ in claims}
    assert linked and linked <= set(PAGES), linked - set(PAGES)
    shown = " ".join(m.value for m in at.markdown)
    for claim in ("CXL removes the host hop", "halves the traffic", "always converges", "keeps accuracy"):
        assert claim in shown
