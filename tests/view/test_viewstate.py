"""lab.view.state: the one table of page controls, its link form, and the re-derivation helpers."""

import base64
import json
import unicodedata
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lab.scenario.document import default_scenario
from lab.view import state
from lab.view.lessons import load_lessons
from tests.conftest import ROOT


def allowed_values(key: str, c: state.Control):
    """Every value the table allows for control ``c`` (a strategy)."""
    setting = c.setting
    if setting.type is bool:
        return st.booleans()
    if setting.type is tuple:
        if setting.choices is not None:
            return st.lists(st.sampled_from(setting.choices), unique=True, max_size=len(setting.choices)).map(tuple)
        # names are kept in Unicode's composed form (NFC), so only composed names are allowed values
        return st.lists(st.text(min_size=1, max_size=20).map(lambda t: unicodedata.normalize("NFC", t)),
                        max_size=8).map(tuple)
    if setting.choices is not None:
        return st.sampled_from(setting.choices)
    if setting.type is int:
        return st.integers(int(setting.min if setting.min is not None else -10**6),
                           int(setting.max if setting.max is not None else 10**6))
    if setting.type is float:
        return st.floats(setting.min if setting.min is not None else -1e6, setting.max if setting.max is not None else 1e6,
                         allow_nan=False, allow_infinity=False)
    return st.text(max_size=40)


def view_values():
    keys = {k: c for k, c in state.VIEW.items() if not c.prefix and not c.transient}
    return st.fixed_dictionaries({}, optional={k: allowed_values(k, c) for k, c in keys.items()})


@settings(max_examples=300, deadline=None)
@given(view_values())
def test_every_allowed_view_round_trips_through_the_link(values):
    sc = default_scenario()
    decoded, notices = state.decode(state.encode(values, sc))
    assert notices == []
    full = {**state.defaults(sc), **decoded}
    for k, v in values.items():
        assert full[k] == v, (k, v, full[k])
        assert type(full[k]) is type(v), (k, v, full[k])


def test_only_changed_controls_go_into_the_link():
    sc = default_scenario()
    assert state.decode(state.encode(state.defaults(sc), sc)) == ({}, [])
    assert state.decode(state.encode({"ar_alg": "tree"}, sc)) == ({"ar_alg": "tree"}, [])


def test_a_transient_control_is_in_the_table_but_travels_in_no_link():
    sc = default_scenario()
    token = state.VIEW["jobs_teacher_token"]
    assert token.transient and token.setting.widget == "password"
    assert "jobs_teacher_token" not in state.defaults(sc)
    assert state.linked("jobs_teacher_token") is None and state.linked("jobs_fault") is state.VIEW["jobs_fault"]
    # a link that carries one anyway (made by hand) is read without it, and says so
    decoded, notices = state.decode(_raw({"jobs_teacher_token": "secret", "jobs_maxrun": 3}))
    assert decoded == {"jobs_maxrun": 3} and len(notices) == 1 and "jobs_teacher_token" in notices[0]
    assert "secret" not in state.decode(state.encode({"jobs_teacher_token": "secret"}, sc))[0].values()
    assert state.control_for("tr_dev_1") is state.VIEW["tr_dev_"] and state.linked("tr_dev_1") is None


def test_a_prefix_control_covers_one_widget_per_device():
    assert state.control_for("pl_slow_gpu") is state.VIEW["pl_slow_"]
    assert state.control_for("pl_slow_") is state.VIEW["pl_slow_"]  # the table's own key
    assert state.control_for("unknown_key") is None
    assert state.decode(state.encode({"pl_slow_fpga": 3.5})) == ({"pl_slow_fpga": 3.5}, [])


def _raw(obj) -> str:
    raw = json.dumps(obj).encode() if not isinstance(obj, bytes) else obj
    return base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


def test_unknown_or_invalid_entries_fall_back_with_a_notice():
    values, notices = state.decode(_raw({"ar_alg": "spiral", "ar_step": 3, "nope": 1, "ar_size": 12345,
                                     "ar_devices": [1, 2], "pg_opts": ["adam", "sgd"]}))
    assert values == {"ar_step": 3}
    assert len(notices) == 5
    assert any("nope" in n and "unknown" in n for n in notices)
    assert any(n.startswith("Algorithm:") and "spiral" in n for n in notices)  # named as the page names it


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(_raw),
                 st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                              lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=12), ch,
                                                                                    max_size=4),
                              max_leaves=12).map(_raw)))
def test_decoding_a_link_never_raises(text):
    values, notices = state.decode(text)
    assert isinstance(values, dict) and isinstance(notices, list)
    for k, v in values.items():
        assert state.control_for(k).check(k, v) == v


def test_non_finite_and_huge_numbers_in_a_link_are_refused():
    for raw in (b'{"ar_work": NaN}', b'{"ar_work": Infinity}', b'{"ar_step": 1e999}',
                b'{"ar_step": ' + b"9" * 5000 + b"}"):
        values, notices = state.decode(_raw(raw))
        assert values == {} and len(notices) == 1, (raw[:30], values, notices)


def test_an_over_long_view_is_not_read():
    values, notices = state.decode("A" * (state.MAX_VIEW_CHARS + 1))
    assert values == {} and "longer" in notices[0]


def test_fit_helpers():
    assert state.fit_choice("b", ["a", "b"], "a") == ("b", False)
    assert state.fit_choice("z", ["a", "b"], "a") == ("a", True)
    assert state.fit_subset(("a",), ["a", "b", "c"], ("b", "c")) == (("a",), False)  # a person's own choice stays
    assert state.fit_subset(("a", "x", "c"), ["a", "b", "c"], ("b", "c")) == (("a", "c"), True)
    assert state.fit_subset(("x", "a"), ["a", "b"], ("a", "b")) == (("a", "b"), True)
    assert state.fit_subset((), ["a", "b"], ("a", "b")) == (("a", "b"), True)
    assert state.fit_range(9, 0, 6) == (6, True)
    assert state.fit_range(3, 0, 6) == (3, False)
    assert state.fit_range(float("nan"), 0, 6) == (0, True)


def test_every_lesson_view_is_allowed_and_names_its_own_page_controls():
    lessons = load_lessons(ROOT / "assets" / "lessons")
    assert len(lessons) == 22
    for lesson in lessons:
        assert lesson.steps
        page = Path(lesson.page).stem
        assert (ROOT / lesson.page).exists()
        assert all(state.VIEW[k].page == page for k in lesson.view), lesson.id
        sc = lesson.scenario(ROOT / "assets" / "lessons")
        for name in lesson.view.get("ar_devices", ()):
            assert name in sc.topology.device_names
