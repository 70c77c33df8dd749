"""The class's runs on a page: a submit queued once per session, and the cost model's predictions of stored runs
beside their measurements, cached per machine profile."""

from __future__ import annotations

import streamlit as st

from lab.processes import load_words
from lab.scenario.document import Scenario
from ui.live import KEEP_ANSWER
from ui.show import caption

@st.cache_resource(show_spinner=False)
def submit_book():
    """Every session's last submit, for the whole server (lab.jobs.guard.SubmitBook says why it is not
    kept in session state)."""
    from lab.jobs.guard import SubmitBook

    return SubmitBook()


def submit_once(owner: str, scenario: Scenario, action: str, store, submit) -> list | None:
    """Queue with ``submit()`` unless this session has just queued the same thing; then say so."""
    jobs, why = submit_book().submit_once(owner, scenario, action, store, submit)
    if why:
        st.info(why, icon=":material/hourglass_top:")
        st.session_state[KEEP_ANSWER] = True
    return jobs


def prediction_beside_measured(store, run_id: str, key: str) -> None:
    """The cost model's prediction of a stored run beside its measurement, from this machine's
    profile; a line saying how to get one where there is no profile."""
    from lab.figures.fidelity import prediction_figure
    from lab.machine.profile import load_profile

    prof = load_profile()
    if prof is None:
        st.caption("No machine profile yet: calibrate this machine on the Fidelity page to see the cost model's "
                   "prediction beside these measurements.")
        return
    table = prediction_table(str(store.path), prof.created, prof, run_id)
    st.plotly_chart(prediction_figure(table, "Predicted beside measured, per step"), key=key)
    caption("modelled", f"Blue: the cost model's step time and its parts from this machine's profile "
            f"({prof.created[:10]}); orange: measured means per step after the warm-up. Over each pair: "
            "error = predicted / measured − 1. The Fidelity page shows every run.")
    if words := load_words(store.get_run(run_id)["info"].get("load")):
        st.warning(words + " The model predicts a quiet machine; the Fidelity page keeps such runs apart.",
                   icon=":material/speed:")


@st.cache_data(ttl=15, show_spinner="predicting the runs from the machine profile")
def predicted_runs(db: str, created: str, _profile, ids: tuple) -> tuple:
    """:func:`lab.machine.fidelity.evaluate_runs` for the runs ``ids`` of the store at ``db``, cached per profile
    (``created`` names it): (rows, skipped)."""
    from lab.machine.fidelity import evaluate_runs
    from lab.store.runs import run_store

    return evaluate_runs(run_store(db), _profile, list(ids))


@st.cache_data(ttl=60, show_spinner=False)
def placement_rows(db: str, created: str, _profile, ids: tuple) -> list:
    """:func:`lab.machine.plans.placement_rows` of the runs ``ids`` of the store at ``db``, cached per profile."""
    from lab.machine.plans import placement_rows as rows
    from lab.store.runs import run_store

    return rows(run_store(db), _profile, list(ids))


@st.cache_data(ttl=60, show_spinner=False)
def prediction_table(db: str, created: str, _profile, run_id: str):
    """:func:`lab.machine.fidelity.prediction_table` of one stored run, cached per profile."""
    from lab.machine.fidelity import prediction_table as table
    from lab.store.runs import run_store

    return table(run_id, _profile, store=run_store(db))
