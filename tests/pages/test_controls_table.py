"""Every input a page shows is built from a table of fields: the view's (lab.view.state.VIEW, through
``ui.control``) or the Scenario's (through ``ui.setting``). A page that draws a widget of its own would
write its label, bounds and default a second time, and its value would not travel in a link."""

import ast

import pytest

from lab.view import state
from tests.conftest import ROOT

INPUTS = {"number_input", "slider", "select_slider", "selectbox", "multiselect", "radio", "checkbox", "toggle",
          "text_input", "text_area", "file_uploader", "data_editor", "date_input", "time_input", "color_picker",
          "pills", "segmented_control", "feedback", "chat_input", "camera_input", "audio_input"}


def _key(node: ast.expr) -> str | None:
    """The literal key of a ui.control call, or the constant start of an f-string key (a prefix)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return node.values[0].value
    return None


def problems(source: str, name: str) -> tuple[list[str], list[str]]:
    """The widgets ``source`` draws itself, and the ui.control keys no control of the table owns."""
    drawn, unknown = [], []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if f.attr in INPUTS:
            drawn.append(f"{name}:{node.lineno} {f.attr}")
        if f.attr == "control" and isinstance(f.value, ast.Name) and f.value.id == "ui":
            if len(node.args) > 1 and isinstance(node.args[1], (ast.Name, ast.Call)):
                continue  # a key the page computes (its knobs, an editor's version): ui.control refuses one in no table
            key = _key(node.args[1]) if len(node.args) > 1 else None
            c = state.control_for(key) if key else None
            if c is None or (isinstance(node.args[1], ast.JoinedStr) and not c.prefix):
                unknown.append(f"{name}:{node.lineno} {ast.unparse(node.args[1]) if len(node.args) > 1 else '?'}")
    return drawn, unknown


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "pages").glob("*.py")))
def test_every_input_of_a_page_comes_from_a_table(page):
    drawn, unknown = problems((ROOT / "pages" / page).read_text(), page)
    assert drawn == [], f"widgets drawn outside the tables: {drawn}"
    assert unknown == [], f"controls in no table: {unknown}"


def test_the_check_finds_a_widget_of_its_own_and_an_unknown_control():
    src = ('import streamlit as st\nimport ui\nst.number_input("Steps", 1, 10, key="x")\n'
           'ui.control(st, "no_such_control")\nui.control(st, f"pl_slow_{n}")\nui.control(st, f"jobs_pick{n}")\n')
    drawn, unknown = problems(src, "p.py")
    assert drawn == ["p.py:3 number_input"]
    assert unknown == ["p.py:4 'no_such_control'", "p.py:6 f'jobs_pick{n}'"]


def test_the_table_holds_the_controls_once_drawn_by_pages_and_marks_the_transient_ones():
    keys = set()
    for p in (ROOT / "pages").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "control" \
                    and len(node.args) > 1 and (k := _key(node.args[1])):
                keys.add(state.control_for(k).prefix_key or k)
    # The Jobs page's fault form, its what-if and the choice of job, the Fidelity page's trace export, the
    # All-reduce page's step player and compute table, the Topology page's new device: all in the table now.
    for k in ("jobs_fault", "jobs_fault_worker", "jobs_fault_step", "jobs_fault_policy", "jobs_fault_ck",
              "jobs_max_steps", "jobs_teacher_token", "jobs_topo", "jobs_maxrun", "jobs_pick", "fid_trace_run",
              "ar_compute", "ar_play", "topo_new_name", "topo_upload", "pl_pin_op", "pl_run_drawn"):
        assert k in keys, k
    assert {k for k in keys if state.VIEW[k].transient} >= {"jobs_teacher_token", "topo_upload", "cmp_confirm", "ar_play"}
    assert not state.VIEW["jobs_fault"].transient and not state.VIEW["fid_trace_run"].transient


def test_a_value_a_control_would_refuse_is_brought_into_its_bounds_before_the_box_is_drawn(spawns):
    """The teacher's form shows the server's limits; one set above the box's bound (LAB_JOB_MAX_S of a day and
    more) is shown at the bound rather than failing the page."""
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st

        import ui

        st.session_state["shown"] = (ui.control(st, "jobs_max_s", value=200_000.0),
                                     ui.control(st, "jobs_fault_worker", hi=1), ui.control(st, "jobs_max_procs", value=0),
                                     ui.control(st, "pl_pin_op", options=["a", "x"]),
                                     ui.control(st, "pl_pin_dev", options=["a", "x"]))

    at = AppTest.from_function(script, default_timeout=30)
    at.session_state["jobs_fault_worker"] = 3  # a link's rank for a bigger job than this one
    # a box's choice after its options changed (another model or topology): kept while offered, else the first
    at.session_state["pl_pin_op"], at.session_state["pl_pin_dev"] = "x", "gone"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["shown"] == (state.VIEW["jobs_max_s"].setting.max, 1, state.VIEW["jobs_max_procs"].setting.min, "x", "a")


def test_a_chosen_run_that_is_not_among_the_options_is_dropped_and_every_label_is_text(spawns):
    """The Runs box with a chosen run the list does not hold (deleted, or queued and not stored yet), and a name
    function that knows only some runs: the box draws, without that run, and names the others."""
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st

        import ui

        st.session_state["shown"] = ui.control(st, "cmp_runs", options=["r1", "r2"], format_func={"r1": "one"}.get)

    at = AppTest.from_function(script, default_timeout=30)
    at.session_state["cmp_runs"] = ["r2", "not-stored-yet", "r1"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["shown"] == ["r2", "r1"]
    assert at.multiselect(key="cmp_runs").options == ["one", "r2"]
