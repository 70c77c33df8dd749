"""Pure figure builders, one module per page family: each takes plain data and returns a plotly figure.
:func:`build` is how a page model's section names its figure (``"module.function"``) and gets it drawn: the
pages and the HTML report build every figure through it."""

from __future__ import annotations

from importlib import import_module
from typing import Any, Mapping


def build(chart: str | None, chart_input: Mapping[str, Any]):
    """The figure that builder ``chart`` (``"module.function"`` of this package) makes of ``chart_input``
    (None without a builder)."""
    if chart is None:
        return None
    module, _, fn = chart.partition(".")
    found = getattr(import_module(f"lab.figures.{module}"), fn, None)
    if not callable(found):
        raise ValueError(f"lab.figures.{module} has no figure builder {fn!r}")
    return found(**chart_input)


__all__ = ["build"]
