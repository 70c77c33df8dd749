"""One click submits once: lab.jobs.guard's decision over plain values, and the phases it reads
from a real run store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.jobs.guard import WINDOW_S, Token, decide, fingerprint, phases
from lab.scenario.document import Compression, default_scenario
from lab.store.runs import JOB_WORKER, RunStore

SC = default_scenario()
FP = fingerprint(SC)


def test_the_fingerprint_follows_every_setting_and_the_action():
    assert fingerprint(SC) == fingerprint(default_scenario())  # same settings, same fingerprint
    gtk = SC.replace(training=SC.training.replace(compression=Compression(kind="group_topk")))
    assert fingerprint(gtk) != FP
    assert fingerprint(SC.replace(training=SC.training.replace(seed=1))) != FP
    assert fingerprint(SC, "compare three optimisers") != FP


def test_a_first_submit_and_a_different_one_go_ahead():
    assert decide(None, FP, 100.0).go
    other = fingerprint(SC.replace(training=SC.training.replace(steps=7)))
    assert decide(Token(FP, 100.0, ("r1",)), other, 100.1, {"r1": "queued"}).go


def test_a_second_click_within_the_window_is_refused_even_before_the_first_has_queued():
    d = decide(Token(FP, 100.0), FP, 100.35)  # the first click's submit is still under way: no run id yet
    assert not d.go and d.message.startswith("Already queued") and "0.3 s ago" in d.message
    d = decide(Token(FP, 100.0, ("r1",)), FP, 100.35, {"r1": "running"})
    assert not d.go and "run r1" in d.message


def test_the_same_settings_are_refused_while_their_run_is_queued_or_starting():
    later = 100.0 + 10 * WINDOW_S
    for phase in ("queued", "starting"):
        d = decide(Token(FP, 100.0, ("r1",)), FP, later, {"r1": phase})
        assert not d.go and f"still {phase}" in d.message and "r1" in d.message
    for phase in ("running", "finished", "gone"):
        assert decide(Token(FP, 100.0, ("r1",)), FP, later, {"r1": phase}).go
    # three runs of one comparison: refused while any of them still waits
    d = decide(Token(FP, 100.0, ("a", "b", "c")), FP, later, {"a": "finished", "b": "running", "c": "queued"})
    assert not d.go and "run c" in d.message


@given(age=st.floats(-1e3, 1e3, allow_nan=False), same=st.booleans(),
       phase=st.sampled_from(["queued", "starting", "running", "finished", "gone"]))
def test_the_rule(age, same, phase):
    fp = FP if same else "something else"
    now = 1000.0 + age
    d = decide(Token(FP, 1000.0, ("r",)), fp, now, {"r": phase})
    assert d.go == (not same or (phase not in ("queued", "starting") and not 0 <= now - 1000.0 < WINDOW_S))
    assert d.go == (d.message == "")


def test_phases_read_from_the_run_store(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    rid = store.create_run(SC, name="t", status="queued")
    assert phases(store, [rid, "nope"]) == {rid: "queued", "nope": "gone"}
    store.set_status(rid, "running")
    assert phases(store, [rid]) == {rid: "starting"}
    store.add_metrics(rid, [{"step": 1, "worker": JOB_WORKER, "loss": 2.0}])
    assert phases(store, [rid]) == {rid: "running"}
    store.set_status(rid, "done")
    assert phases(store, [rid]) == {rid: "finished"}


def test_a_submit_book_lets_one_of_two_quick_identical_submits_through(tmp_path):
    from lab.jobs.guard import WINDOW_S, SubmitBook
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    class Job:
        def __init__(self, rid):
            self.run_id = rid

    store, book, sc, queued = RunStore(tmp_path / "runs.db"), SubmitBook(), default_scenario(), []

    def submit():
        queued.append(store.create_run(sc))
        return [Job(queued[-1])]

    jobs, why = book.submit_once("s1", sc, "run", store, submit, now=100.0)
    assert [j.run_id for j in jobs] == queued and why == ""
    assert book.submit_once("s1", sc, "run", store, submit, now=100.5) == (None, f"Already queued: run {queued[0]} "
                                                                             "has these settings and is still queued.")
    assert book.submit_once("s2", sc, "run", store, submit, now=100.5)[0] is not None  # another session
    store.set_status(queued[0], "done")
    assert book.submit_once("s1", sc, "run", store, submit, now=100.0 + WINDOW_S + 1)[0] is not None
    assert len(queued) == 3 and not book.pending("s1", now=200.0)


def test_a_failed_submit_leaves_the_book_as_it_was(tmp_path):
    from lab.jobs.guard import SubmitBook
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    book, sc = SubmitBook(), default_scenario()

    def fail():
        assert book.pending("s1", now=1.0)  # while under way, a second click is a repeat
        raise RuntimeError("no slot")

    with pytest.raises(RuntimeError):
        book.submit_once("s1", sc, "run", RunStore(tmp_path / "runs.db"), fail, now=1.0)
    assert "s1" not in book.tokens
