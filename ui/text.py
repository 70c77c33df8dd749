"""The one place user text (names, a link's values, messages that quote them) becomes safe text for anything
Streamlit renders as Markdown: :func:`lab.scenario.text.plain`, which the lab's HTML report uses too."""

from __future__ import annotations

from lab.scenario.text import plain

__all__ = ["plain"]
