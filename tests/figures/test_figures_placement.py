"""lab.figures.placement: the Gantt caption and the balancing loop's time unit."""

from __future__ import annotations

from types import SimpleNamespace

from lab.figures import placement as figs


def test_gantt_caption_names_the_visibility_threshold():
    assert figs.MIN_VISIBLE == 0.006
    assert figs.gantt_caption() == (
        "each bar is an operator on a device, from its start to its finish (hover: its class and why it is there); "
        "the red lane under a device holds the transfers arriving there. Bars shorter than 0.6 % of the time axis "
        "carry a diamond so they stay visible. Gaps are waiting (for inputs or for the device).")


def _res(*times: float) -> SimpleNamespace:
    return SimpleNamespace(rounds=[SimpleNamespace(round_time=t) for t in times])


def test_balance_time_unit_follows_the_longest_round_of_any_rule():
    assert figs.balance_time_unit({"wait": _res(0.002, 0.004), "throughput": _res(0.003)}) == (1e3, "ms")
    assert figs.balance_time_unit({"wait": _res(2e-6), "throughput": _res(5.0, 1e-3)}) == (1.0, "s")
    assert figs.balance_time_unit({"wait": _res(3e-5)}) == (1e6, "µs")
