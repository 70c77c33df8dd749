"""Home: what the lab is, a link to each page, and the lessons."""

import pandas as pd
import streamlit as st

import ui
from app import available_pages
from lab.view.lessons import class_view, load_lessons


def _open_lesson(lesson) -> None:
    """Button callback: load the lesson's scenario and view, go to its page next run."""
    st.session_state["home_goto"] = (lesson.page, ui.open_lesson(lesson))


ui.scenario_sidebar()
st.title("Heterogeneous distributed training lab")
st.markdown(
    "Draw a cluster of host CPUs, GPUs, FPGAs, ASICs, DPUs and NPUs, see which layer the cost model "
    "puts on which device and why, step through what an all-reduce really sends, and run small real "
    "multi-process trainings (torch.distributed over gloo on this machine's CPU) to compare Adam, "
    "AdaBelief and Max-AdaBelief with and without gradient compression.\n\n"
    "Every figure says what it is: "
    f"{ui.badge('measured')} on this machine, {ui.badge('modelled')} by the lab's cost model from the "
    f"topology's numbers, or {ui.badge('emulated')} (a device or link made slower by waiting). "
    "The device and link numbers are illustrative assumptions taken from public datasheets; edit them.")
st.subheader("Pages")
DESCRIPTIONS = {  # short: a page link does not wrap, and a projector is 1024 pixels wide
    "Topology": "build the cluster; routes; CXL versus PCIe",
    "Placement": "which operator runs where, and why; load balancing",
    "All-reduce": "all-reduce step by step, modelled and measured",
    "Optimisers": "Adam, AdaBelief, Max-AdaBelief on 2-D functions",
    "Training": "real multi-process runs, live",
    "Compare": "runs side by side, with their noise",
    "Compression": "Group-TopK, sparse rings, the Cholesky claim",
    "Jobs": "job lifecycle, faults and recovery",
    "Fidelity": "prediction beside measurement",
    "About the designs": "the four designs, their claims, where each is tested",
}
for file, title, icon in available_pages():
    if title == "Home":
        continue
    st.page_link(file, label=f"**{title}**: {DESCRIPTIONS.get(title, '')}", icon=icon)

st.subheader("Lessons")
st.markdown("Short lessons, one for every claim of the designs and every page. Each opens its page with its "
            "scenario (in the page link, so the address bar can be shared) and lesson mode on, which hides the "
            "advanced controls; switch it off in the sidebar. Your ticks and answers are kept for you, on every page "
            "and after a reload.")
with ui.guarded("the lessons"):
    pages = {f for f, _, _ in available_pages()}
    for lesson in load_lessons(ui.LESSONS):
        with st.container(border=True):
            st.markdown(f"**{lesson.title}**")
            with st.expander("What this lesson shows"):
                st.markdown(lesson.text(ui.LESSONS))
                st.markdown("\n".join(f"{i + 1}. {step}" for i, step in enumerate(lesson.steps)))
            st.button("Open this lesson", key=f"lesson_{lesson.id}", on_click=_open_lesson, args=(lesson,),
                      disabled=lesson.page not in pages, icon=":material/school:",
                      help=None if lesson.page in pages else f"{lesson.page} is not part of this build yet")
if ui.teacher():
    with st.expander("The class's progress (teacher)", icon=":material/school:"):
        with ui.guarded("the class's progress"):
            from lab.store.runs import store

            steps_rows, students = class_view(store().lesson_progress(), load_lessons(ui.LESSONS))
            st.dataframe(pd.DataFrame(steps_rows), hide_index=True, key="home_class_steps")
            st.caption("Per step: how many students ticked it, tried its question and answered it right.")
            st.dataframe(pd.DataFrame(students), hide_index=True, key="home_class_students")
            st.caption("Per student (numbered in the order they started; no ids): the steps ticked in each lesson.")
goto = st.session_state.pop("home_goto", None)
if goto:
    st.switch_page(goto[0], query_params=goto[1])
