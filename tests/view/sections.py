"""Reading a page model in tests: its sections by key, each figure built the way the page builds it."""
from __future__ import annotations

import json

from ui.show import figure


def by_key(sections) -> dict:
    keys = [s.key for s in sections]
    assert len(keys) == len(set(keys)), f"two sections share a key: {keys}"
    return {s.key: s for s in sections}


def figure_json(section) -> dict:
    """The section's figure as the browser receives it (plotly's JSON)."""
    return json.loads(figure(section).to_json())
