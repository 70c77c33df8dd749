"""Shared page plumbing (the only streamlit-aware module outside pages/).

* the one Scenario in ``st.session_state`` (initialised here, from the ``?s=`` link if present),
* the measured / modelled / emulated labels every figure carries,
* ``guarded``: shows a LabError as a plain message and anything unexpected as a short
  message, never a traceback.
* ``plain``: the one way user text (names, a link's values, messages that quote them) reaches a
  Markdown-rendering element (st.markdown, st.caption, st.error, ..., widget labels) as text.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from pathlib import Path
from typing import Iterator

import streamlit as st

from lab.view import state as viewstate
from lab.errors import LabError
from lab.processes import load_words
from lab.view.lessons import Lesson, find_lesson, ticks_from_param, ticks_param, unknown_lesson_notice
from lab.scenario.document import Scenario, Spec, default_scenario
from lab.scenario.names import labels

log = logging.getLogger("lab.ui")

SCENARIO_KEY = "scenario"
URL_PARAM = "s"
VIEW_PARAM = "v"  # the page's controls (lab.view.state), beside the scenario in a link
VIEW_SHADOW = "_view_values"  # every control's last value, kept while its page is not shown
VIEW_NOTICES = "_view_notices"
LESSON_KEY = "lesson_mode"  # persistent (session) value of the lesson switch
LESSON_WIDGET = "lesson_mode_toggle"
LESSON_PARAM = "lesson"
LESSON_ID_PARAM = "l"  # the lesson whose steps a link shows
LESSON_ACTIVE = "lesson_active"
LESSON_TICKS_PARAM = "lt"  # the active lesson's ticked steps, in a link
LESSON_TICKS = "_lesson_ticks"  # lesson id -> the steps this student ticked (kept across pages)
LESSONS = Path(__file__).resolve().parent / "assets" / "lessons"

KIND_BADGES = {
    "measured": ":green-badge[:material/straighten: measured]",
    "modelled": ":blue-badge[:material/functions: modelled]",
    "emulated": ":orange-badge[:material/hourglass: emulated]",
}


def scenario() -> Scenario:
    """The session's Scenario, created on first use (from the page link when it carries one)."""
    if SCENARIO_KEY not in st.session_state:
        sc = default_scenario()
        param = st.query_params.get(URL_PARAM)
        if param:
            try:
                sc = Scenario.from_url_param(param)
            except LabError as exc:
                st.warning("The scenario in this link could not be read, so the default is shown. "
                           + _plain(str(exc)))
        st.session_state[SCENARIO_KEY] = sc
    return st.session_state[SCENARIO_KEY]


def set_scenario(sc: Scenario) -> None:
    st.session_state[SCENARIO_KEY] = sc


def badge(kind: str) -> str:
    return KIND_BADGES[kind]


def caption(kind: str, text: str) -> None:
    """A figure caption that starts with the measured/modelled/emulated badge."""
    st.caption(f"{badge(kind)} {text}")


def columns(spec: dict) -> dict:
    """Streamlit column configs from a plain column spec (a table's columns as lab/view declares them):
    column -> {"kind": "number" | "datetime" | "select", and "label", "format", "min", "max", "step",
    "options" as the kind takes them}."""
    make = {"number": st.column_config.NumberColumn, "datetime": st.column_config.DatetimeColumn,
            "select": st.column_config.SelectboxColumn}
    names = {"min": "min_value", "max": "max_value"}
    return {col: make[c["kind"]](**{names.get(k, k): v for k, v in c.items() if k != "kind"})
            for col, c in spec.items()}


@contextlib.contextmanager
def guarded(what: str = "this step") -> Iterator[None]:
    """Show a LabError as its message and any other exception as a short message, no traceback;
    either as text (a refusal quotes the names it refuses)."""
    try:
        yield
    except LabError as exc:
        st.error(_plain(str(exc)), icon=":material/error:")
    except Exception as exc:  # noqa: BLE001 - the user must never see a traceback
        log.exception("unexpected error in %s", what)
        st.error(_plain(f"Something went wrong in {what}: {type(exc).__name__}: {exc}"), icon=":material/error:")


def _route_through_app() -> None:
    """Until app.py's ``st.navigation`` has run once in the server process, Streamlit treats the
    ``pages/`` folder as an old-style multipage app: a server whose first request is a deep link
    (``/allreduce?lesson=1``) would run that file on its own, without app.py (no page titles in
    the sidebar, no wide layout). Turn that mode off and rerun, so app.py routes the request."""
    try:
        from streamlit import config
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # another Streamlit: nothing to undo
        return
    if config.get_option("global.appTest"):  # AppTest sets the old mode again before every run
        return
    if getattr(PagesManager, "uses_pages_directory", False):
        PagesManager.uses_pages_directory = False
        st.rerun()


def _sync_view(sc: Scenario) -> None:
    """Keep every control of every page set while its page is not shown.

    Streamlit forgets a widget's value once a run does not draw it (another page is open). The
    last value of every control of :data:`lab.view.state.VIEW` is kept in a shadow and put back
    before the page draws its widgets; a control never touched gets its default from the table.
    On a session's first run, the link's ``?v=`` fills the shadow (checked against the table)."""
    ss = st.session_state
    shadow = ss.setdefault(VIEW_SHADOW, {})
    for key in list(ss.keys()):
        if isinstance(key, str) and viewstate.linked(key) is not None:
            # Set it again as a plain value, so that Streamlit keeps it (not its first value) once
            # its widget is not drawn.
            ss[key] = shadow[key] = ss[key]
    if not ss.get("_view_link_read"):
        ss["_view_link_read"] = True
        values, notices = viewstate.decode(st.query_params.get(VIEW_PARAM))
        shadow.update(values)
        if notices:
            ss[VIEW_NOTICES] = notices
    for key, value in {**viewstate.defaults(sc), **shadow}.items():
        if key not in ss:
            ss[key] = list(value) if isinstance(value, tuple) else value


def remember(key: str, value) -> None:
    """Keep the value a control's widget has in this run (a widget inside a fragment: the page's full runs,
    which keep every control, do not see a fragment's runs)."""
    st.session_state.setdefault(VIEW_SHADOW, {})[key] = value


def view_value(key: str):
    """The current value of control ``key`` (before or after its widget is drawn)."""
    return st.session_state.get(key, st.session_state.get(VIEW_SHADOW, {}).get(key))


def set_view(key: str, value, notice: str | None = None) -> None:
    """Set control ``key`` before its widget is drawn in this run (a page re-deriving a choice that
    no longer fits, a lesson opening its view), with an optional one-line notice, shown as text (it
    names the old choice, which may come from a link)."""
    st.session_state[key] = list(value) if isinstance(value, tuple) else value
    st.session_state.setdefault(VIEW_SHADOW, {})[key] = value
    if notice:
        st.info(_plain(notice), icon=":material/info:")


def view_link_params(sc: Scenario) -> dict[str, str]:
    """The query parameters that reproduce this view: the scenario, every control, lesson mode."""
    shadow = dict(st.session_state.get(VIEW_SHADOW, {}))
    for key in list(st.session_state.keys()):
        if isinstance(key, str) and viewstate.linked(key) is not None:
            shadow[key] = st.session_state[key]
    params = {URL_PARAM: sc.to_url_param(), VIEW_PARAM: viewstate.encode(shadow, sc)}
    if lesson_mode():
        params[LESSON_PARAM] = "1"
    if st.session_state.get(LESSON_ACTIVE):
        params[LESSON_ID_PARAM] = st.session_state[LESSON_ACTIVE]
        ticks = st.session_state.get(LESSON_TICKS, {}).get(params[LESSON_ID_PARAM])
        if ticks:
            params[LESSON_TICKS_PARAM] = ticks_param(ticks)
    return params


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


def _ticks(lesson: Lesson) -> set[int]:
    """This student's ticked steps of ``lesson``: what the run store kept for them (a reload, another page),
    and those a link brought (``lt=``), read once."""
    ss = st.session_state
    book = ss.setdefault(LESSON_TICKS, {})
    if lesson.id not in book:
        from lab.store.runs import store

        got = store().lesson_ticks(owner(), lesson.id)
        if st.query_params.get(LESSON_ID_PARAM) == lesson.id:
            got |= ticks_from_param(st.query_params.get(LESSON_TICKS_PARAM), len(lesson.steps))
        book[lesson.id] = got
    return book[lesson.id]


def _tick(lesson: Lesson, i: int) -> None:
    """A step's box changed: keep it for this student (across pages and reloads) and for the teacher's view."""
    from lab.store.runs import store

    on = bool(st.session_state.get(f"lesson_tick_{lesson.id}_{i}"))
    ticks = _ticks(lesson)
    (ticks.add if on else ticks.discard)(i)
    store().record_lesson(owner(), lesson.id, i, ticked=on)


def _answer(lesson: Lesson, i: int) -> None:
    """The student checks their answer to step ``i``'s question: the lab says whether it is right and keeps it; a
    right answer ticks the step."""
    from lab.store.runs import store

    q = lesson.questions[i]
    value = st.session_state.get(f"lesson_q_{lesson.id}_{i}")
    ok = q.check(value)
    st.session_state[f"lesson_fb_{lesson.id}_{i}"] = (ok, q.feedback(value))
    store().record_lesson(owner(), lesson.id, i, answered=ok)
    if ok:
        _ticks(lesson).add(i)


def hidden(key: str) -> bool:
    """Whether the active lesson hides control ``key`` on this page (its view value stays in force)."""
    lesson = find_lesson(LESSONS, st.session_state.get(LESSON_ACTIVE))
    return lesson is not None and lesson_mode() and key in lesson.hide


def _lesson_panel(page: str) -> None:
    """The active lesson's steps, on the lesson's own page: a short list the student ticks off, with the
    questions the lab checks. Ticks are this student's, kept in the run store (across pages and reloads) and
    carried by the page link."""
    ss = st.session_state
    if LESSON_ACTIVE not in ss:  # a shared link names its lesson
        ss[LESSON_ACTIVE] = st.query_params.get(LESSON_ID_PARAM)
        if ss[LESSON_ACTIVE] and find_lesson(LESSONS, ss[LESSON_ACTIVE]) is None:
            st.info(_plain(unknown_lesson_notice(ss[LESSON_ACTIVE])), icon=":material/info:")
            ss[LESSON_ACTIVE] = None  # so the page link does not carry it on
            del st.query_params[LESSON_ID_PARAM]
    lesson = find_lesson(LESSONS, ss.get(LESSON_ACTIVE))
    if lesson is None:
        return
    if st.query_params.get(LESSON_ID_PARAM) != lesson.id:  # in the address, so a reload keeps the lesson open
        st.query_params[LESSON_ID_PARAM] = lesson.id
    if Path(lesson.page).stem != page:
        return
    ticks = _ticks(lesson)
    with st.container(border=True, key="lesson_panel"):
        st.markdown(f"**:material/school: Lesson: {_plain(lesson.title)}** ({len(ticks)} of {len(lesson.steps)} "
                    "steps done)")
        for i, step in enumerate(lesson.steps):
            key = f"lesson_tick_{lesson.id}_{i}"
            ss[key] = i in ticks  # set before the box is drawn: it shows what this student did, on any page
            st.checkbox(f"{i + 1}. {step}", key=key, on_change=_tick, args=(lesson, i))
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
            c2.button("Check", key=f"lesson_check_{lesson.id}_{i}", on_click=_answer, args=(lesson, i))
            fb = ss.get(f"lesson_fb_{lesson.id}_{i}")
            if fb:
                (c3.success if fb[0] else c3.warning)(fb[1])
        if st.button("End the lesson", key="lesson_end", icon=":material/close:"):
            ss[LESSON_ACTIVE] = None
            if LESSON_ID_PARAM in st.query_params:
                del st.query_params[LESSON_ID_PARAM]
            st.rerun()


def scenario_sidebar() -> Scenario:
    """The sidebar every page shows: the scenario's name and topology, and a link that reproduces the
    whole view (this page, the scenario, every control)."""
    _route_through_app()
    _identity_cookie()
    notice = st.container()  # always drawn, so the page's own elements keep their places when it is empty
    if "teacher" in st.query_params:
        # A token in an address stays in the browser's history and the server's logs: the teacher
        # signs in on the Jobs page instead, and a link's token is dropped unread.
        del st.query_params["teacher"]
        notice.warning("A teacher's token in a link is not accepted (it would stay in the browser's history): "
                       "sign in on the Jobs page instead.", icon=":material/key:")
    sc = scenario()
    _sync_view(sc)
    with st.sidebar:
        st.markdown(f"**Scenario:** {_plain(sc.name)}  \n**Topology:** {_plain(sc.topology.name)} "
                    f"({len(sc.topology.devices)} devices)")
        if st.button("Put this view in the page link", key="ui_link",
                     help="The address bar then opens this page with this scenario and these controls"):
            st.query_params.from_dict(view_link_params(sc))
        _lesson_toggle()
    for notice in st.session_state.pop(VIEW_NOTICES, []):
        st.info("From the link: " + _plain(notice) + ".", icon=":material/info:")
    _lesson_panel(Path(sys._getframe(1).f_code.co_filename).stem)  # the calling page's file
    return sc


def lesson_mode() -> bool:
    """The "lesson" switch: True when pages should hide their advanced controls.

    Kept in session state (so it survives page changes) and in the link as ``?lesson=1`` (so a
    shared link opens in lesson mode). The toggle itself is drawn by :func:`scenario_sidebar`."""
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


def _lesson_toggle() -> None:
    def changed() -> None:
        set_lesson_mode(st.session_state[LESSON_WIDGET])

    st.session_state[LESSON_WIDGET] = lesson_mode()  # drawn once per run, after any switch elsewhere
    st.toggle("Lesson mode", key=LESSON_WIDGET, on_change=changed,
              help="Hide the advanced controls on every page; the link then opens in lesson mode too (?lesson=1)")


OWNER_KEY = "job_owner"
_COOKIE_PENDING = "_owner_cookie_pending"


def owner() -> str:
    """This student's owner id: from the token their browser keeps in a cookie (lab.jobs.access says
    why a cookie and not the link), so a reload or a second tab is the same student. A browser
    without one gets a new token, written into its cookie by :func:`_identity_cookie`."""
    from lab.jobs import access

    ss = st.session_state
    if OWNER_KEY not in ss:
        try:
            token = st.context.cookies.get(access.COOKIE)
        except Exception:  # noqa: BLE001 - no request behind this run (a test harness): a new student
            token = None
        if not access.valid_token(token):
            token = access.new_token()
            ss[_COOKIE_PENDING] = token
        ss[OWNER_KEY] = access.owner_id(token)
    return ss[OWNER_KEY]


def _identity_cookie() -> None:
    """Write a new student's token into the browser's cookie (every run of the session that made it,
    until a reload reads it back). It is the lab's own constant script; the token is URL-safe."""
    from lab.jobs import access

    owner()
    token = st.session_state.get(_COOKIE_PENDING)
    if token and access.valid_token(token):
        st.html(f"<script>document.cookie = '{access.COOKIE}={token}; Path=/; Max-Age=31536000; "
                "SameSite=Strict';</script>", unsafe_allow_javascript=True)


def job_manager():
    """(the server's one JobManager of the run store, shared by every session and page, with its fair
    queue; this student's owner id in that queue)."""
    from lab.jobs.manager import shared

    return shared(), owner()


def teacher() -> bool:
    """Whether this student signed in as the teacher (on the Jobs page) on this server."""
    jm, me = job_manager()
    return jm.is_teacher(me)


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
    from lab.store.runs import store

    return evaluate_runs(store(db), _profile, list(ids))


@st.cache_data(ttl=60, show_spinner=False)
def placement_rows(db: str, created: str, _profile, ids: tuple) -> list:
    """:func:`lab.machine.plans.placement_rows` of the runs ``ids`` of the store at ``db``, cached per profile."""
    from lab.machine.plans import placement_rows as rows
    from lab.store.runs import store

    return rows(store(db), _profile, list(ids))


@st.cache_data(ttl=60, show_spinner=False)
def prediction_table(db: str, created: str, _profile, run_id: str):
    """:func:`lab.machine.fidelity.prediction_table` of one stored run, cached per profile."""
    from lab.machine.fidelity import prediction_table as table
    from lab.store.runs import store

    return table(run_id, _profile, store=store(db))


_FROM_SESSION = object()  # a view control's value: the view seeded the session, so the widget is given none


def _widget(where, spec: Spec, key: str, value=_FROM_SESSION, format_func=None, *, options=None, hi=None,
            label: str | None = None, **kw):
    """The widget of one field in ``where`` (a column, the sidebar, ``st``): its label, bounds, choices,
    help, step, format and kind come from the field's :class:`lab.scenario.document.Spec`. ``options`` are
    the choices where the page knows them only now (devices, operators, runs), ``hi`` a bound the page
    knows only now, ``label`` a label that counts something; ``kw`` goes to the widget (a table's data)."""
    given = value is not _FROM_SESSION
    names = labels(spec.family) if spec.family else {}
    fmt = format_func or (lambda v: names.get(v, str(v)))
    label = spec.label if label is None else label
    c = viewstate.control_for(key)
    if c is not None and c.prefix and label == spec.label:  # one box per device: the device names it
        label = f"{_plain(key[len(c.prefix_key):])} {label}"
    if spec.widget == "table":
        return where.data_editor(kw.pop("data"), key=key, **kw)
    kw.setdefault("help", spec.help or None)
    if spec.widget == "file":
        return where.file_uploader(label, key=key, **kw)
    if spec.type is bool:
        make = where.toggle if spec.widget == "toggle" else where.checkbox
        return make(label, key=key, **({"value": bool(value)} if given else {}), **kw)
    choices = spec.choices if options is None else tuple(options)
    if choices is not None:
        options = list(choices)
        if spec.type is tuple:
            return where.multiselect(label, options, key=key, format_func=fmt, **kw)
        if spec.widget == "select_slider":
            return where.select_slider(label, options, key=key, format_func=fmt, **kw)
        at = {"index": options.index(value)} if given and value in options else {}
        if spec.widget == "radio":
            kw.setdefault("horizontal", True)
            return where.radio(label, options, key=key, format_func=fmt, **at, **kw)
        return where.selectbox(label, options, key=key, format_func=fmt, **at, **kw)
    if spec.type is str:
        if given:
            kw["value"] = value
        return where.text_input(label, key=key, **({"type": "password"} if spec.widget == "password" else {}), **kw)
    lo, hi = (None if b is None else spec.type(b) for b in (spec.min, spec.max if hi is None else hi))
    if given:
        kw["value"] = spec.type(value)
    if spec.step is not None:
        kw.setdefault("step", spec.type(spec.step))
    if spec.widget == "slider":
        return where.slider(label, lo, hi, key=key, **kw)
    if spec.format is not None:
        kw.setdefault("format", spec.format)
    return where.number_input(label, lo, hi, key=key, **kw)


def setting(where, spec: Spec, value, key: str, *, format_func=None, **kw):
    """The widget of one field of the Scenario's table (:data:`lab.scenario.document.TRAINING_FIELDS`,
    ``COMPRESSION_FIELDS``), showing ``value``. ``format_func`` names the choices where a page says them its
    own way."""
    return _widget(where, spec, key, value, format_func, **kw)


def control(where, key: str, *, options=None, hi=None, value=_FROM_SESSION, format_func=None, **kw):
    """The widget of control ``key`` of the view table (:data:`lab.view.state.VIEW`; a prefix control's key
    names its device). A kept control's value comes from the session (the view seeds it); a control the
    active lesson hides draws nothing and keeps its view value. A transient control starts at ``value``, else
    at its default. A kept value that the page's ``options`` or ``hi`` no longer allow falls back to the
    default (or the first option, or ``hi``) before the widget is drawn, as a browser's box would."""
    if hidden(key):
        return view_value(key)
    c = viewstate.control_for(key)
    if c is None:
        raise KeyError(f"the control {key!r} is in no table (lab.view.state.VIEW)")
    ss = st.session_state
    if options is not None and key in ss and c.spec.type is not tuple and ss[key] not in options:
        del ss[key]
    if hi is not None and isinstance(ss.get(key), (int, float)) and ss[key] > hi:
        ss[key] = hi
    if key in ss:
        value = _FROM_SESSION  # the session's value is the widget's: a second one would make Streamlit warn
    elif c.spec.widget in ("table", "file"):
        value = _FROM_SESSION  # these start empty, or from the data the page gives
    else:
        if value is _FROM_SESSION:
            value = c.spec.default
        if options is not None and c.spec.type is not tuple:
            value, _ = viewstate.fit_choice(value, options, next(iter(options), None))
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a value the box would refuse
            top = c.spec.max if hi is None else hi
            value = max(value, c.spec.min) if c.spec.min is not None else value
            value = min(value, top) if top is not None else value
        if not c.transient and value is not None:
            set_view(key, value)  # a kept control's value lives in the session, as the view's others do
            value = _FROM_SESSION
        elif value is None:
            value = _FROM_SESSION
    return _widget(where, c.spec, key, value, format_func, options=options, hi=hi, **kw)


_WJ = "\u2060"  # word joiner: invisible, and it breaks the patterns Markdown turns into links by itself


def _plain(text: str) -> str:
    """User text shown as text in anything Streamlit renders as Markdown (st.markdown, st.caption,
    st.error/warning/info/success, st.toast, st.expander and st.tabs labels, widget labels, metric
    labels): escape Markdown and HTML special characters (``&`` too, so that ``&lt;`` stays five
    characters), and break the bare addresses (``http://``, ``www.``, ``name@host``) that
    Streamlit's Markdown would turn into live links even when every special character is escaped."""
    text = re.sub(r"(?i)(?<=[a-z]):(?=//)", ":" + _WJ, str(text))
    text = re.sub(r"(?i)\b(www)\.", r"\1" + _WJ + ".", text).replace("@", _WJ + "@")
    out = []
    for ch in text:
        if ch in "\\`*_{}[]()#+-.!|<>~$:&":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


plain = _plain
