"""A calibration that waits for a quiet machine before it measures."""
from __future__ import annotations

from lab.machine import calibrate as cal
from lab.processes import LOADED_SHARE


class FakeMeter:
    """A LoadMeter whose windows report the given shares of other work, in turn."""

    def __init__(self, shares):
        self.shares = list(shares)

    def __call__(self):
        share = self.shares.pop(0)
        return type("M", (), {"result": lambda _self: {"others_share": share, "wall_s": 0.0}})()


def test_it_starts_at_the_first_quiet_window_and_says_why_it_waits():
    said = []
    meter = FakeMeter([0.6, 0.4, LOADED_SHARE / 2, 0.9])
    got = cal.wait_until_quiet(60.0, lambda msg, frac: said.append(msg), window_s=0.0, meter=meter)
    assert got["others_share"] == LOADED_SHARE / 2 and meter.shares == [0.9]  # stopped at the quiet window
    assert len(said) == 2 and "other work takes 60 %" in said[0] and "other work takes 40 %" in said[1]
    assert "calibrates anyway" in said[0]


def test_when_the_time_runs_out_it_calibrates_anyway_with_the_last_load():
    meter = FakeMeter([0.7, 0.7, 0.7])
    got = cal.wait_until_quiet(0.0, None, window_s=0.0, meter=meter)
    assert got["others_share"] == 0.7 and len(meter.shares) == 2  # one window, then the limit


def test_the_background_calibration_passes_the_wait_on(monkeypatch, tmp_path):
    seen = {}

    class Popen:
        def __init__(self, cmd, **kw):
            seen["cmd"] = cmd

        def wait(self):
            return 0

    monkeypatch.setattr(cal.subprocess, "Popen", Popen)
    cal.start_background(tmp_path / "p.json", quick=True, wait_quiet_s=cal.PAGE_WAIT_S)
    cmd = seen["cmd"]
    assert cmd[cmd.index("--wait-quiet") + 1] == f"{cal.PAGE_WAIT_S:g}" and "--quick" in cmd
    cal.start_background(tmp_path / "q.json")
    assert "--wait-quiet" not in seen["cmd"]


def test_while_it_waits_the_progress_line_says_so_and_promises_no_end():
    p = {"message": "waiting for a quiet machine: other work takes 60 % of the CPU", "fraction": 0.0, "started": 0.0}
    assert cal.progress_line(p, now=90.0) == "waiting for a quiet machine: other work takes 60 % of the CPU (1 min 30 s so far)"
    p = {"message": "compute", "fraction": 0.5, "started": 0.0}
    assert cal.progress_line(p, now=60.0) == "calibrating: compute (50% done, 1 min 0 s so far, about 1 min 0 s left)"
