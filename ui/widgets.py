"""Widgets from the tables: a Scenario field's widget (its label, bounds, choices, help and kind from the field's
Setting) and a page control's widget (from lab.view.state.VIEW), kept in the session and hidden by the active
lesson."""

from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from lab.scenario.document import Setting
from lab.scenario.names import labels
from lab.view import state as viewstate
from lab.view.section import row_widths
from ui.lessons import hidden
from ui.session import set_view, view_value
from ui.text import plain

_FROM_SESSION = object()  # a view control's value: the view seeded the session, so the widget is given none


def _named(fmt, value) -> str:
    name = fmt(value)
    return str(value) if name is None else str(name)


def _widget(where, setting: Setting, key: str, value=_FROM_SESSION, format_func=None, *, options=None, hi=None,
            label: str | None = None, **kw):
    """The widget of one field in ``where`` (a column, the sidebar, ``st``): its label, bounds, choices,
    help, step, format and kind come from the field's :class:`lab.scenario.document.Setting`. ``options`` are
    the choices where the page knows them only now (devices, operators, runs), ``hi`` a bound the page
    knows only now, ``label`` a label that counts something; ``kw`` goes to the widget (a table's data)."""
    given = value is not _FROM_SESSION
    names = labels(setting.family) if setting.family else dict(setting.names)
    fmt = format_func or (lambda v: names.get(v, str(v)))
    label = setting.label if label is None else label
    c = viewstate.control_for(key)
    if c is not None and c.prefix and label == setting.label:  # one box per device: the device names it
        label = f"{plain(key[len(c.prefix_key):])} {label}"
    if setting.widget == "table":
        return where.data_editor(kw.pop("data"), key=key, **kw)
    kw.setdefault("help", setting.help or None)
    if setting.widget == "file":
        return where.file_uploader(label, key=key, **kw)
    if setting.type is bool:
        make = where.toggle if setting.widget == "toggle" else where.checkbox
        return make(label, key=key, **({"value": bool(value)} if given else {}), **kw)
    choices = setting.choices if options is None else tuple(options)
    if choices is not None:
        options = list(choices)
        named = fmt
        fmt = lambda v: _named(named, v)  # noqa: E731 - a label is text even for a value the names lack
        if setting.type is tuple:
            held = st.session_state.get(key)
            if isinstance(held, (list, tuple)) and any(v not in options for v in held):
                # a value no longer (or not yet) among the options (a run deleted, or not stored yet) is dropped:
                # the widget takes only its options
                st.session_state[key] = [v for v in held if v in options]
            return where.multiselect(label, options, key=key, format_func=fmt, **kw)
        if setting.widget == "select_slider":
            return where.select_slider(label, options, key=key, format_func=fmt, **kw)
        at = {"index": options.index(value)} if given and value in options else {}
        if setting.widget == "radio":
            kw.setdefault("horizontal", True)
            return where.radio(label, options, key=key, format_func=fmt, **at, **kw)
        return where.selectbox(label, options, key=key, format_func=fmt, **at, **kw)
    if setting.type is str:
        if given:
            kw["value"] = value
        return where.text_input(label, key=key, **({"type": "password"} if setting.widget == "password" else {}), **kw)
    lo, hi = (None if b is None else setting.type(b) for b in (setting.min, setting.max if hi is None else hi))
    if given:
        kw["value"] = setting.type(value)
    if setting.step is not None:
        kw.setdefault("step", setting.type(setting.step))
    if setting.widget == "slider":
        return where.slider(label, lo, hi, key=key, **kw)
    if setting.format is not None:
        kw.setdefault("format", setting.format)
    return where.number_input(label, lo, hi, key=key, **kw)


def setting(where, rules: Setting, value, key: str, *, format_func=None, **kw):
    """The widget of one field of the Scenario's table (:data:`lab.scenario.document.TRAINING_FIELDS`,
    ``COMPRESSION_FIELDS``), showing ``value``. ``format_func`` names the choices where a page says them its
    own way."""
    return _widget(where, rules, key, value, format_func, **kw)


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
    if options is not None and key in ss and c.setting.type is not tuple and ss[key] not in options:
        del ss[key]
    if hi is not None and isinstance(ss.get(key), (int, float)) and ss[key] > hi:
        ss[key] = hi
    if key in ss:
        value = _FROM_SESSION  # the session's value is the widget's: a second one would make Streamlit warn
    elif c.setting.widget in ("table", "file"):
        value = _FROM_SESSION  # these start empty, or from the data the page gives
    else:
        if value is _FROM_SESSION:
            value = c.setting.default
        if options is not None and c.setting.type is not tuple:
            value, _ = viewstate.fit_choice(value, options, next(iter(options), None))
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a value the box would refuse
            top = c.setting.max if hi is None else hi
            value = max(value, c.setting.min) if c.setting.min is not None else value
            value = min(value, top) if top is not None else value
        if not c.transient and value is not None:
            set_view(key, value)  # a kept control's value lives in the session, as the view's others do
            value = _FROM_SESSION
        elif value is None:
            value = _FROM_SESSION
    return _widget(where, c.setting, key, value, format_func, options=options, hi=hi, **kw)


def per_device(where, defaults: Mapping[str, Any], pick: str | None = None) -> dict:
    """A prefix control's box for each of ``defaults`` (its key per device -> the default), five to a row of
    ``where``; with ``pick`` (a control choosing one device), the picked device's box only, every other value
    kept from the session: a box per device of a 256-device cluster is a page of boxes nobody reads, and every
    box is a widget each rerun checks again. Returns every key's value."""
    if pick is None:
        cols = where.columns(min(len(defaults), 5))
        return {k: control(cols[i % len(cols)], k, value=x) for i, (k, x) in enumerate(defaults.items())}
    values = {k: x if (x := view_value(k)) is not None else d for k, d in defaults.items()}
    owner = viewstate.control_for(next(iter(defaults)))
    names = [k[len(owner.prefix_key):] for k in defaults]
    # open on a device whose value is not the control's own default (a slowed one), if any
    first = next((n for n, k in zip(names, defaults) if values[k] != owner.setting.default), names[0])
    picked = control(where, pick, options=names, value=first)
    key = owner.prefix_key + (picked if picked in names else names[0])  # a lesson may hide the choice: the first device
    box = control(where, key, value=defaults[key])
    values[key] = values[key] if box is None else box
    return values


def form(key: str, rows, submit: str = "Run", **options) -> dict:
    """A form built from the view table: ``rows`` is a list of rows of control keys (a row of one control
    spans the page; a ``(key, width)`` pair widens a control against its row's others, each 1), ``options`` a
    control's ``options``/``hi`` the page knows only now. The controls lesson mode hides draw nothing and keep
    their values. Returns every control's value by key."""
    values = {}
    with st.form(key):
        for items in rows:
            width = row_widths(items)
            row = list(width)
            drawn = [k for k in row if not hidden(k)]
            places = st.columns([width[k] for k in drawn]) if len(drawn) > 1 else [st] * len(drawn)
            for k in row:
                values[k] = control(places[drawn.index(k)], k, **options.get(k, {})) if k in drawn else view_value(k)
        st.form_submit_button(submit, type="primary", key=f"{key}_run")
    return values


def settings_form(value, form) -> dict:
    """The widgets of a settings section of the Scenario (``value``, its Training or its Compression) as ``form``
    (:class:`lab.view.fields.SettingsForm`, a page model's) lays them out, each from its field's Setting and
    starting at ``value``'s field. A field whose ``when`` does not hold of the values above it is not drawn; one
    lesson mode hides (its Setting is advanced, or the active lesson names its key) draws nothing. Either keeps
    ``value``'s. Returns every field's value by name, for the section's ``replace``."""
    values: dict = {}
    for row in form.rows:
        if all(hidden(f.key, form.setting(f)) for f in row.fields):
            values.update({f.name: getattr(value, f.name) for f in row.fields})
            continue
        widths = row.columns()
        places = iter(st.columns(widths, vertical_alignment=row.align) if len(widths) > 1 else [st])
        for f in row.fields:
            if not f.drawn(values):
                values[f.name] = getattr(value, f.name)
                continue
            where, rules = next(places), form.setting(f)
            if hidden(f.key, rules):
                values[f.name] = getattr(value, f.name)
                continue
            values[f.name] = setting(where, rules, getattr(value, f.name), f.key, disabled=f.greyed(values),
                                     format_func=None if f.names is None else f.names.get)
    return values
