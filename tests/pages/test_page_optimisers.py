"""The Optimisers page under AppTest, rendered whole: its two forms built from the view table, its model's sections
drawn with their badges, a form's Run, and a refusal shown as a message. What the sections hold is tested on the
page model (tests/view/test_view_optimisers.py)."""

import json

from lab.scenario.names import OPTIMIZER_LABELS
from lab.view.state import VIEW
from tests.conftest import app_test, assert_no_exception

PAGE = "pages/optimisers.py"


def test_the_page_draws_its_forms_from_the_table_and_its_model_whole(spawns):
    at = app_test(PAGE)
    assert_no_exception(at)
    assert [h.value for h in at.header] == ["2-D playground", "Adam's counterexample"]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 5                                      # paths, loss, effective step, x_t, regret
    captions = [c.value for c in at.caption]
    assert sum("measured" in c for c in captions) >= 5 and not any("modelled" in c for c in captions)
    text = "\n".join(m.value for m in at.markdown)
    assert "The belief term" in text and "The max" in text and "What to look for" in text
    assert any("After 50500 steps" in i.value for i in at.info)
    assert list(at.dataframe[0].value["optimiser"])[0] == "Adam"
    # label, bounds, step, help and choices of every control come from lab.view.state.VIEW
    for key in ("pg_lr", "pg_seed", "ce_lr", "ce_steps"):
        w, setting = at.number_input(key=key), VIEW[key].setting
        assert (w.label, w.min, w.max, w.value) == (setting.label, setting.min, setting.max, setting.default), key
    assert at.number_input(key="ce_steps").step == VIEW["ce_steps"].setting.step
    assert at.number_input(key="pg_seed").help == VIEW["pg_seed"].setting.help
    steps = at.slider(key="pg_steps")
    assert (steps.label, steps.min, steps.max, steps.step) == ("Steps (count)", 10, 2000, 10)
    assert at.multiselect(key="ce_opts").options == [OPTIMIZER_LABELS[k] for k in VIEW["ce_opts"].setting.choices]
    assert at.radio(key="ce_schedule").options == ["lr / √t (the paper's)", "constant lr"]
    assert at.selectbox(key="pg_fn").options[0] == "Rosenbrock"

    at.radio(key="ce_schedule").set_value("constant")
    at.number_input(key="ce_steps").set_value(5050)
    at.button(key="counterexample_run").click().run()
    assert_no_exception(at)
    assert any("After 5050 steps \\(constant lr" in i.value for i in at.info)
    at.multiselect(key="pg_opts").set_value([])
    at.button(key="playground_run").click().run()
    assert not at.exception
    assert any("pick at least one optimiser" in e.value for e in at.error)   # a message, not a traceback
