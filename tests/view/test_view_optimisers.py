"""lab.view.optimisers: the Optimisers page's model, computed from the form's values (real optimiser runs)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from lab.errors import LabError
from lab.scenario.names import OPTIMIZER_LABELS
from lab.view import optimisers as view
from lab.view.state import VIEW
from tests.view.sections import by_key, figure_json

DEFAULTS = {k: VIEW[k].setting.default for row in view.PLAYGROUND_FORM + view.COUNTEREXAMPLE_FORM for k in row}


def test_the_forms_name_only_optimiser_controls_of_the_view_table_each_once():
    keys = [k for row in view.PLAYGROUND_FORM + view.COUNTEREXAMPLE_FORM for k in row]
    assert len(keys) == len(set(keys)) and all(VIEW[k].page == "optimisers" for k in keys)
    assert {k for k, c in VIEW.items() if c.page == "optimisers"} == set(keys)


def test_the_default_playground_is_measured_with_units_on_every_axis():
    s = by_key(view.playground(DEFAULTS))
    assert list(s) == ["pg_traj", "pg_loss", "pg_eff", "pg_summary"]
    assert all(x.kind == "measured" for x in s.values())
    traj = figure_json(s["pg_traj"])
    assert traj["frames"] and traj["layout"]["updatemenus"][0]["buttons"][0]["method"] == "animate"
    for key in ("pg_traj", "pg_loss", "pg_eff"):
        layout = figure_json(s[key])["layout"]
        assert "(" in layout["xaxis"]["title"]["text"] and "(" in layout["yaxis"]["title"]["text"], key
    assert "The belief term" in s["pg_loss"].text and "The max" in s["pg_eff"].text
    assert "Lowest final loss in this run" in s["pg_traj"].text
    assert (s["pg_loss"].side, s["pg_eff"].side) == ("left", "right")
    table = s["pg_summary"].table
    assert table[0]["optimiser"] == "Adam" and all(r["steps run (count)"] == 400 for r in table)


def test_another_function_fewer_optimisers_and_an_own_start():
    s = by_key(view.playground({**DEFAULTS, "pg_fn": "beale", "pg_steps": 100, "pg_opts": ("adam", "maxadabelief")}))
    traj = figure_json(s["pg_traj"])
    assert traj["layout"]["title"]["text"].startswith("Beale")
    assert [t["name"] for t in traj["data"][2:]] == ["Adam", "Max-AdaBelief (max of s)"]
    assert len(s["pg_summary"].table) == 2 and all(r["steps run (count)"] == 100 for r in s["pg_summary"].table)
    s = by_key(view.playground({**DEFAULTS, "pg_fn": "noisy_quadratic", "pg_own_start": True, "pg_x0": 1.0,
                                "pg_y0": -1.0}))
    title = figure_json(s["pg_traj"])["layout"]["title"]["text"]
    assert title.startswith("Noisy quadratic") and "start (1, -1)" in title
    assert "from (1, -1)" in s["pg_traj"].caption


def test_a_run_that_stopped_early_is_a_warning_beside_its_figure(monkeypatch):
    real = view.run_playground("rosenbrock", ("adam", "adabelief"), steps=20)
    real["adam"] = replace(real["adam"], stopped="stopped at step 7: the gradient overflowed")
    monkeypatch.setattr(view, "_playground", lambda *a: real)
    s = by_key(view.playground(DEFAULTS))
    assert [(n.level, n.text) for n in s["pg_traj"].notices] == [
        ("warning", "Adam: stopped at step 7: the gradient overflowed")]


def test_an_empty_selection_is_refused_with_a_message():
    with pytest.raises(LabError, match="pick at least one optimiser"):
        view.playground({**DEFAULTS, "pg_opts": ()})


def test_the_counterexample_says_what_the_run_shows():
    s = by_key(view.counterexample(DEFAULTS))
    assert list(s) == ["ce_x", "ce_regret"] and all(x.kind == "measured" for x in s.values())
    sentence = s["ce_x"].notices[0].text
    assert "After 50500 steps" in sentence and "Adam sits near x = +1" in sentence
    assert [t["name"] for t in figure_json(s["ce_x"])["data"]] == [OPTIMIZER_LABELS[k] for k in VIEW["ce_opts"].setting.default]
    s = by_key(view.counterexample({**DEFAULTS, "ce_schedule": "constant", "ce_lr": 0.02, "ce_steps": 5050}))
    assert "After 5050 steps (constant lr = 0.02" in s["ce_x"].notices[0].text
    assert "5050 steps" in s["ce_x"].caption
