"""How often a live part of a page refreshes itself: its base interval while the render is quick, longer when a
render is slow (a busy class server), so the page is idle most of the time and a click never queues behind
refreshes."""
from __future__ import annotations

import math

#: A live part is idle at least this share of the time: its interval is at least render / (1 - share).
IDLE_SHARE = 2 / 3
#: The longest interval: a live part still shows a run's end within this.
MAX_INTERVAL_S = 30.0


def interval(base_s: float, render_s: float | None) -> float:
    """The refresh interval after a render of ``render_s`` seconds: ``base_s`` doubled until the render takes at
    most a third of it, at most :data:`MAX_INTERVAL_S` (steps of doubling, so a render time that wavers does
    not change it at every refresh)."""
    if render_s is None or not math.isfinite(render_s) or render_s <= 0:
        return base_s
    want = render_s / (1.0 - IDLE_SHARE)
    if want <= base_s:
        return base_s
    return min(MAX_INTERVAL_S, base_s * 2 ** math.ceil(math.log2(want / base_s) - 1e-12))
