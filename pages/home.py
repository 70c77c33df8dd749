"""Home: what the lab is, a link to each page, the lessons, and (for the teacher) the class's progress."""

import streamlit as st

import ui
from lab.view import home as view


def _open_lesson(lesson) -> None:
    """Button callback: load the lesson's scenario and view, go to its page next run."""
    st.session_state["home_goto"] = (lesson.page, ui.open_lesson(lesson))


def class_progress() -> None:
    with st.expander("The class's progress (teacher)", icon=":material/school:", expanded=True):
        with ui.guarded("the class's progress"):
            ui.show_all(view.class_sections(ui.LESSONS))


def pages() -> None:
    st.subheader("Pages")
    for file, label, icon in view.page_links(view.available_pages()):
        st.page_link(file, label=label, icon=icon)


def lessons() -> None:
    st.subheader("Lessons")
    st.markdown(view.LESSONS_INTRO)
    with ui.guarded("the lessons"):
        for lesson, text, steps, missing in view.lessons(ui.LESSONS, view.available_pages()):
            with st.container(border=True):
                st.markdown(f"**{lesson.title}**")
                with st.expander("What this lesson shows"):
                    st.markdown(text)
                    st.markdown("\n".join(steps))
                st.button("Open this lesson", key=f"lesson_{lesson.id}", on_click=_open_lesson, args=(lesson,),
                          disabled=missing is not None, icon=":material/school:", help=missing)


ui.scenario_sidebar()
st.title("Heterogeneous distributed training lab")
st.markdown(view.INTRO.format(measured=ui.badge("measured"), modelled=ui.badge("modelled"),
                              emulated=ui.badge("emulated")))
for part in view.parts(ui.teacher()):
    {"class": class_progress, "pages": pages, "lessons": lessons}[part]()
goto = st.session_state.pop("home_goto", None)
if goto:
    st.switch_page(goto[0], query_params=goto[1])
