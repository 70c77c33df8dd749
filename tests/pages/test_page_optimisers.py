"""The Optimisers page under AppTest: loads, runs the playground and the counterexample, shows errors
as messages."""

import json

from lab.scenario.names import OPTIMIZER_LABELS
from tests.conftest import app_test, assert_no_exception

PAGE = "pages/optimisers.py"


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def _chart_specs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_page_loads_with_measured_labels_and_both_sections(spawns):
    at = app_test(PAGE)
    assert_no_exception(at)
    assert [h.value for h in at.header] == ["2-D playground", "Adam's counterexample"]
    specs = _chart_specs(at)
    assert len(specs) == 5                                      # paths, loss, effective step, x_t, regret
    assert specs[0]["frames"] and specs[0]["layout"]["updatemenus"][0]["buttons"][0]["method"] == "animate"
    for spec in specs:                                          # units on every axis
        assert "(" in spec["layout"]["xaxis"]["title"]["text"] and "(" in spec["layout"]["yaxis"]["title"]["text"]
    captions = [c.value for c in at.caption]
    assert sum("measured" in c for c in captions) >= 5 and not any("modelled" in c for c in captions)
    text = _markdown(at)
    assert "The belief term" in text and "The max" in text and "Lowest final loss in this run" in text
    # the counterexample's sentence is computed from the run at the default settings
    info = " ".join(i.value for i in at.info)
    assert "After 50500 steps" in info and "Adam sits near x = +1" in info
    table = at.dataframe[0].value
    assert list(table["optimiser"])[0] == "Adam" and (table["steps run (count)"] == 400).all()


def test_changing_the_function_and_pressing_run(spawns):
    at = app_test(PAGE)
    at.selectbox(key="pg_fn").set_value("beale")
    at.slider(key="pg_steps").set_value(100)
    at.multiselect(key="pg_opts").set_value(["adam", "maxadabelief"])
    at.button(key="pg_run").click().run()
    assert_no_exception(at)
    spec = _chart_specs(at)[0]
    assert spec["layout"]["title"]["text"].startswith("Beale")
    assert [t["name"] for t in spec["data"][2:]] == ["Adam", "Max-AdaBelief (max of s)"]
    table = at.dataframe[0].value
    assert len(table) == 2 and (table["steps run (count)"] == 100).all()

    at.selectbox(key="pg_fn").set_value("noisy_quadratic")
    at.checkbox(key="pg_own_start").check()
    at.number_input(key="pg_x0").set_value(1.0)
    at.number_input(key="pg_y0").set_value(-1.0)
    at.button(key="pg_run").click().run()
    assert_no_exception(at)
    spec = _chart_specs(at)[0]
    assert spec["layout"]["title"]["text"].startswith("Noisy quadratic")
    assert "start (1, -1)" in spec["layout"]["title"]["text"]


def test_counterexample_controls_and_an_empty_selection(spawns):
    at = app_test(PAGE)
    at.radio(key="ce_schedule").set_value("constant")
    at.number_input(key="ce_lr").set_value(0.02)
    at.number_input(key="ce_steps").set_value(5050)
    at.button(key="ce_run").click().run()
    assert_no_exception(at)
    info = " ".join(i.value for i in at.info)
    assert "After 5050 steps (constant lr = 0.02" in info

    at.multiselect(key="pg_opts").set_value([])
    at.button(key="pg_run").click().run()
    assert not at.exception
    assert any("pick at least one optimiser" in e.value for e in at.error)   # a message, not a traceback


def test_the_controls_are_built_from_the_view_table(spawns):
    """Label, bounds, step, help and choices of every control come from lab.view.state.VIEW."""
    from lab.view.state import VIEW

    at = app_test(PAGE)
    assert_no_exception(at)
    for key in ("pg_lr", "pg_seed", "ce_lr", "ce_steps"):
        w, spec = at.number_input(key=key), VIEW[key].spec
        assert (w.label, w.min, w.max) == (spec.label, spec.min, spec.max), key
        assert w.value == spec.default
    assert at.number_input(key="ce_steps").step == VIEW["ce_steps"].spec.step
    assert at.number_input(key="pg_seed").help == VIEW["pg_seed"].spec.help
    steps = at.slider(key="pg_steps")
    assert (steps.label, steps.min, steps.max, steps.step) == ("Steps (count)", 10, 2000, 10)
    assert at.multiselect(key="ce_opts").options == [OPTIMIZER_LABELS[k] for k in VIEW["ce_opts"].spec.choices]
    assert at.radio(key="ce_schedule").label == VIEW["ce_schedule"].spec.label
