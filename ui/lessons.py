"""Lessons: the lesson mode switch, opening a lesson's view, and the active lesson's panel of steps and checked
questions, whose ticks are this student's, kept in the run store and carried by the page link."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from lab.view import state as viewstate
from lab.view.lessons import Lesson, find_lesson, ticks_from_param, unknown_lesson_notice
from ui.identity import owner
from ui.session import URL_PARAM, VIEW_PARAM, VIEW_SHADOW, set_scenario
from ui.text import plain

LESSON_KEY = "lesson_mode"  # persistent (session) value of the lesson switch
LESSON_WIDGET = "lesson_mode_toggle"
LESSON_PARAM = "lesson"
LESSON_ID_PARAM = "l"  # the lesson whose steps a link shows
LESSON_ACTIVE = "lesson_active"
LESSON_TICKS_PARAM = "lt"  # the active lesson's ticked steps, in a link
LESSON_TICKS = "_lesson_ticks"  # lesson id -> the steps this student ticked (kept across pages)
LESSONS = Path(__file__).resolve().parent.parent / "assets" / "lessons"


def open_lesson(lesson: Lesson) -> dict[str, str]:
    """Load the lesson's scenario and view, switch lesson mode on, show its steps; returns the
    query parameters of its page (call it from a button callback, before the page's widgets)."""
    sc = lesson.scenario(LESSONS)
    set_scenario(sc)
    shadow = st.session_state.setdefault(VIEW_SHADOW, {})
    for key, value in {**viewstate.defaults(sc), **lesson.view}.items():
        if viewstate.VIEW[key].page == Path(lesson.page).stem:
            st.session_state[key] = list(value) if isinstance(value, tuple) else value
            shadow[key] = value
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(("lesson_tick_", "lesson_fb_"))]:
        del st.session_state[key]
    st.session_state.get(LESSON_TICKS, {}).pop(lesson.id, None)  # read again from the store
    st.session_state[LESSON_ACTIVE] = lesson.id
    set_lesson_mode(True)
    return {URL_PARAM: sc.to_url_param(), VIEW_PARAM: viewstate.encode(lesson.view, sc), LESSON_PARAM: "1",
            LESSON_ID_PARAM: lesson.id}


def student_ticks(lesson: Lesson) -> set[int]:
    """This student's ticked steps of ``lesson``: what the run store kept for them (a reload, another page),
    and those a link brought (``lt=``), read once and kept for this student, so that the panel and the
    teacher's view agree."""
    ss = st.session_state
    book = ss.setdefault(LESSON_TICKS, {})
    if lesson.id not in book:
        from lab.store.runs import run_store

        got = run_store().lessons.lesson_ticks(owner(), lesson.id)
        if st.query_params.get(LESSON_ID_PARAM) == lesson.id:
            linked, notice = ticks_from_param(st.query_params.get(LESSON_TICKS_PARAM), len(lesson.steps))
            if notice:
                st.info(plain(notice[0].upper() + notice[1:] + "."), icon=":material/info:")
            for i in sorted(linked - got):
                run_store().lessons.record_lesson(owner(), lesson.id, i, ticked=True)
            got |= linked
        book[lesson.id] = got
    return book[lesson.id]


def tick(lesson: Lesson, i: int) -> None:
    """A step's box changed: keep it for this student (across pages and reloads) and for the teacher's view."""
    from lab.store.runs import run_store

    on = bool(st.session_state.get(f"lesson_tick_{lesson.id}_{i}"))
    ticks = student_ticks(lesson)
    (ticks.add if on else ticks.discard)(i)
    run_store().lessons.record_lesson(owner(), lesson.id, i, ticked=on)


def answer(lesson: Lesson, i: int) -> None:
    """The student checks their answer to step ``i``'s question: the lab says whether it is right and keeps it; a
    right answer ticks the step."""
    from lab.store.runs import run_store

    q = lesson.questions[i]
    value = st.session_state.get(f"lesson_q_{lesson.id}_{i}")
    ok = q.check(value)
    st.session_state[f"lesson_fb_{lesson.id}_{i}"] = (ok, q.feedback(value))
    run_store().lessons.record_lesson(owner(), lesson.id, i, answered=ok)
    if ok:
        student_ticks(lesson).add(i)


def hidden(key: str, setting=None) -> bool:
    """Whether lesson mode hides control ``key`` (its table marks it advanced: the view table's control, or
    ``setting``, the Scenario field's :class:`lab.scenario.document.Setting` the widget of key ``key`` shows; or the
    active lesson names it); its value stays in force."""
    if not lesson_mode():
        return False
    c = viewstate.control_for(key)
    if (c is not None and c.advanced) or (setting is not None and setting.advanced):
        return True
    lesson = find_lesson(LESSONS, st.session_state.get(LESSON_ACTIVE))
    return lesson is not None and key in lesson.hide


def lesson_panel(page: str) -> None:
    """The active lesson's steps, on the lesson's own page: a short list the student ticks off, with the
    questions the lab checks. Ticks are this student's, kept in the run store (across pages and reloads) and
    carried by the page link."""
    ss = st.session_state
    handed = class_lesson()
    if handed is not None and ss.get(LESSON_ACTIVE) != handed.id:  # the teacher's lesson, on every page
        ss[LESSON_ACTIVE] = handed.id
    if LESSON_ACTIVE not in ss:  # a shared link names its lesson
        ss[LESSON_ACTIVE] = st.query_params.get(LESSON_ID_PARAM)
        if ss[LESSON_ACTIVE] and find_lesson(LESSONS, ss[LESSON_ACTIVE]) is None:
            st.info(plain(unknown_lesson_notice(ss[LESSON_ACTIVE])), icon=":material/info:")
            ss[LESSON_ACTIVE] = None  # so the page link does not carry it on
            del st.query_params[LESSON_ID_PARAM]
    lesson = find_lesson(LESSONS, ss.get(LESSON_ACTIVE))
    if lesson is None:
        return
    if st.query_params.get(LESSON_ID_PARAM) != lesson.id:  # in the address, so a reload keeps the lesson open
        st.query_params[LESSON_ID_PARAM] = lesson.id
    if Path(lesson.page).stem != page:
        return
    ticks = student_ticks(lesson)
    with st.container(border=True, key="lesson_panel"):
        st.markdown(f"**:material/school: Lesson: {plain(lesson.title)}** ({len(ticks)} of {len(lesson.steps)} "
                    "steps done)")
        for i, step in enumerate(lesson.steps):
            key = f"lesson_tick_{lesson.id}_{i}"
            ss[key] = i in ticks  # set before the box is drawn: it shows what this student did, on any page
            st.checkbox(f"{i + 1}. {step}", key=key, on_change=tick, args=(lesson, i))
            q = lesson.questions.get(i)
            if q is None:
                continue
            c1, c2, c3 = st.columns([3, 1, 2], vertical_alignment="bottom")
            qkey = f"lesson_q_{lesson.id}_{i}"
            label = q.ask + (f" ({q.unit})" if q.unit else "")
            if q.kind == "choice":
                c1.radio(label, q.choices, index=None, key=qkey)
            else:
                c1.number_input(label, value=None, format="%.6g", key=qkey)
            c2.button("Check", key=f"lesson_check_{lesson.id}_{i}", on_click=answer, args=(lesson, i))
            fb = ss.get(f"lesson_fb_{lesson.id}_{i}")
            if fb:
                (c3.success if fb[0] else c3.warning)(fb[1])
        if handed is None and st.button("End the lesson", key="lesson_end", icon=":material/close:"):
            ss[LESSON_ACTIVE] = None
            if LESSON_ID_PARAM in st.query_params:
                del st.query_params[LESSON_ID_PARAM]
            st.rerun()


def class_lesson() -> Lesson | None:
    """The lesson the teacher handed out, for a student with a seat in the open class (None otherwise: no
    class, no lesson handed out, no seat, or the teacher)."""
    from lab.store.runs import run_store

    state = run_store().class_book.class_state()
    if state is None or not state.lesson or run_store().class_book.seat(owner()) is None:
        return None
    return find_lesson(LESSONS, state.lesson)


def lesson_mode() -> bool:
    """The "lesson" switch: True when pages should hide their advanced controls.

    Kept in session state (so it survives page changes) and in the link as ``?lesson=1`` (so a
    shared link opens in lesson mode). The toggle itself is drawn by :func:`scenario_sidebar`. A student
    the teacher handed a lesson to is in lesson mode, with no switch, until the teacher releases it."""
    if class_lesson() is not None:
        return True
    if LESSON_KEY not in st.session_state:
        st.session_state[LESSON_KEY] = st.query_params.get(LESSON_PARAM) == "1"
    on = bool(st.session_state[LESSON_KEY])
    if on and st.query_params.get(LESSON_PARAM) != "1":
        st.query_params[LESSON_PARAM] = "1"
    return on


def set_lesson_mode(on: bool) -> None:
    """Switch lesson mode (call it from a widget callback or before the sidebar is drawn)."""
    st.session_state[LESSON_KEY] = bool(on)
    try:
        st.session_state[LESSON_WIDGET] = bool(on)
    except st.errors.StreamlitAPIException:  # the toggle is already drawn in this run
        pass
    if on:
        st.query_params[LESSON_PARAM] = "1"
    elif LESSON_PARAM in st.query_params:
        del st.query_params[LESSON_PARAM]


def lesson_toggle() -> None:
    def changed() -> None:
        set_lesson_mode(st.session_state[LESSON_WIDGET])

    st.session_state[LESSON_WIDGET] = lesson_mode()  # drawn once per run, after any switch elsewhere
    handed = class_lesson()
    st.toggle("Lesson mode", key=LESSON_WIDGET, on_change=changed, disabled=handed is not None,
              help="The teacher handed this lesson out to the class: it stays on until they release it"
              if handed is not None else
              "Hide the advanced controls on every page; the link then opens in lesson mode too (?lesson=1)")
