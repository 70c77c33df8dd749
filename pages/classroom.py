"""Class: the teacher opens a class and hands out a lesson; students join with a code and their name."""

import streamlit as st

import ui
from lab.view import classroom as view

ui.scenario_sidebar()
st.title("Class")
st.markdown(view.INTRO)
desk = view.ClassDesk(*ui.job_manager())

CLASS_REFRESH_S = 5.0  # the teacher's view of who joined and how far each got, without a click


def follow_hand_out(state) -> None:
    """The lesson box shows the lesson handed out, each time one is (the teacher's or another tab's)."""
    handed = (state.lesson, state.handed) if state else None
    if state and state.lesson and st.session_state.get("_cls_handed") != handed:
        ui.set_view("cls_lesson", state.lesson)
    st.session_state["_cls_handed"] = handed


@ui.live("class", CLASS_REFRESH_S, ui.teacher() and desk.state() is not None)
def teacher_view() -> None:
    with ui.guarded("the class"):
        state = desk.state()
        follow_hand_out(state)
        if flash := st.session_state.pop("_cls_flash", None):
            st.success(ui.plain(flash))
        ui.show_all(view.teacher(ui.LESSONS))
        c1, c2, c3 = st.columns(3)
        if not state:
            if c1.button("Open a class", key="cls_open", icon=":material/groups:"):
                desk.open()
                st.rerun()
        else:  # both end the class the students are in: each asks once more
            with c1.popover("Open a new class", icon=":material/groups:"):
                st.markdown(view.NEW_CLASS_WARNING)
                if st.button("Yes, open a new class", key="cls_open", type="primary"):
                    desk.open()
                    st.rerun()
            with c2.popover("Close the class", icon=":material/logout:"):
                st.markdown(view.CLOSE_WARNING)
                if st.button("Yes, close the class", key="cls_close", type="primary"):
                    desk.close()
                    st.rerun()
            if c3.button("New join code (seats stay)", key="cls_new_code", icon=":material/key:"):
                desk.new_code()
                st.rerun()
        if state:
            titles = view.lessons(ui.LESSONS)
            with st.form("cls_lesson_form"):
                lesson = ui.control(st, "cls_lesson", options=list(titles), format_func=titles.get)
                hand, free = st.columns(2)
                if hand.form_submit_button("Hand this lesson out", type="primary", key="cls_hand"):
                    desk.hand_out(lesson)
                    st.rerun()
                if state.lesson and free.form_submit_button("Release the class from the lesson", key="cls_release"):
                    desk.hand_out(None)
                    st.rerun()
            seats = desk.seats()
            if seats:
                with st.form("cls_remove_form"):
                    who = ui.control(st, "cls_remove", options=list(seats), format_func=seats.get)
                    if st.form_submit_button("Remove this student (their jobs stop)", key="cls_remove_go"):
                        stopped = desk.remove(who)
                        # said after the page is drawn again, which no longer lists them
                        st.session_state["_cls_flash"] = view.removed_line(seats.get(who, ""), len(stopped))
                        st.rerun()
            removed = desk.removed()
            if removed:
                with st.form("cls_back_form"):
                    who = ui.control(st, "cls_back", options=list(removed), format_func=removed.get)
                    if st.form_submit_button("Let this student back in", key="cls_back_go"):
                        desk.let_back(who)
                        st.rerun()


if ui.teacher():
    teacher_view()
else:
    with ui.guarded("joining the class"):
        sections = view.student(desk.owner)
        ui.show_all(sections)
        if sections[0].key == "cls_join":
            values = ui.form("cls_join_form", view.JOIN_FORM, submit="Join")
            if st.session_state.get("cls_join_form_run"):
                desk.join(values["cls_code"], values["cls_name"], ui.client())
                st.rerun()
