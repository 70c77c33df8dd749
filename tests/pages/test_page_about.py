"""The About page under AppTest: below the designs, the glossary shows every term with its explanation, as
text."""

from __future__ import annotations

from lab.view.about import GLOSSARY, GLOSSARY_HEAD
from tests.conftest import app_test, assert_no_exception


def test_the_glossary_shows_every_term_with_its_explanation(spawns):
    at = app_test("pages/about.py")
    assert_no_exception(at)
    assert [h.value for h in at.header] == [GLOSSARY_HEAD]
    shown = [m.value.replace("\\", "") for m in at.markdown]  # shown as text: Markdown's characters escaped
    for term, meaning in GLOSSARY:
        assert f"**{term}**: {meaning}" in shown, term
