"""A reload, a new tab or a page opened by its address shows the student's last view (kept in the run store per
student); a link's own view wins; another student does not get it."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, assert_no_exception


def _session(owner: str, query: dict | None = None, page: str = "pages/optimisers.py") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["job_owner"] = owner  # the student a browser's cookie names
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page).run()
    assert_no_exception(at)
    return at


def test_a_new_session_of_the_same_student_shows_their_last_view(lab_db, spawns):
    first = _session("student-a")
    first.slider(key="pg_steps").set_value(100)
    first.selectbox(key="pg_fn").set_value("beale")
    first.button(key="playground_run").click().run()
    first.run()
    again = _session("student-a")  # a reload: a new session, the same cookie
    assert again.slider(key="pg_steps").value == 100 and again.selectbox(key="pg_fn").value == "beale"
    other = _session("student-b")
    assert other.slider(key="pg_steps").value == 400  # another student starts from the defaults
    from lab.view import state as viewstate
    link = _session("student-a", query={"v": viewstate.encode({"pg_steps": 200}, None)})
    assert link.slider(key="pg_steps").value == 200  # a link's view wins over the kept one
