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


class Clock:
    """A clock the test sets by hand (seconds)."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_first_submit_and_a_different_one_go_ahead():
    assert decide(None, FP, 100.0).go
    other = fingerprint(SC.replace(training=SC.training.replace(steps=7)))
    assert decide(Token(FP, 100.0, ("r1",)), other, 100.1, {"r1": "queued"}).go


def test_a_second_click_is_refused_while_the_first_is_being_queued_however_long_that_takes():
    for now in (100.35, 100.0 + 3 * WINDOW_S):  # no run id yet: the first click's submit is still under way
        d = decide(Token(FP, 100.0), FP, now)
        assert not d.go and "is being queued" in d.message and f"{now - 100.0:.1f} s ago" in d.message
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

    clock = Clock(100.0)
    store, book, sc, queued = RunStore(tmp_path / "runs.db"), SubmitBook(clock), default_scenario(), []

    def submit():
        queued.append(store.create_run(sc))
        return [Job(queued[-1])]

    jobs, why = book.submit_once("s1", sc, "run", store, submit)
    assert [j.run_id for j in jobs] == queued and why == ""
    clock.t = 100.5
    assert book.submit_once("s1", sc, "run", store, submit) == (None, f"Already queued: run {queued[0]} "
                                                                 "has these settings and is still queued.")
    assert book.submit_once("s2", sc, "run", store, submit)[0] is not None  # another session
    store.set_status(queued[0], "done")
    clock.t = 100.0 + WINDOW_S + 1
    assert book.submit_once("s1", sc, "run", store, submit)[0] is not None
    assert len(queued) == 3 and not book.pending("s1")


def test_a_failed_submit_leaves_the_book_as_it_was(tmp_path):
    from lab.jobs.guard import SubmitBook
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    book, sc = SubmitBook(), default_scenario()

    def fail():
        assert book.pending("s1")  # while under way, a second click is a repeat
        raise RuntimeError("no slot")

    with pytest.raises(RuntimeError):
        book.submit_once("s1", sc, "run", RunStore(tmp_path / "runs.db"), fail)
    assert "s1" not in book.tokens


def test_a_submit_slower_than_the_window_stays_pending_and_a_second_click_meanwhile_queues_nothing(tmp_path):
    """A first submit builds the model and the data before it queues: seconds on a loaded server. A second
    click during it is a repeat and the page keeps polling (pending) until the run is in the store."""
    import threading

    from lab.jobs.guard import SubmitBook

    clock = Clock(100.0)
    store, book, queued = RunStore(tmp_path / "runs.db"), SubmitBook(clock), []
    inside, release = threading.Event(), threading.Event()

    class Job:
        def __init__(self, rid):
            self.run_id = rid

    def slow():
        inside.set()
        assert release.wait(30)
        queued.append(store.create_run(SC))
        return [Job(queued[-1])]

    first = threading.Thread(target=book.submit_once, args=("s1", SC, "run", store, slow))
    first.start()
    try:
        assert inside.wait(30)
        clock.t = 100.0 + 3 * WINDOW_S
        jobs, why = book.submit_once("s1", SC, "run", store, slow)
        assert jobs is None and "is being queued" in why
        assert book.pending("s1") and not book.pending("s2")
    finally:
        release.set()
        first.join(30)
    assert len(queued) == 1 and not book.pending("s1") and book.tokens["s1"].run_ids == (queued[0],)


def test_a_script_run_stopped_inside_a_submit_leaves_the_book_as_it_was(tmp_path):
    """Streamlit stops a superseded script run with an exception that is not an Exception; the session's
    next click must not read as a repeat of a submit that will never end."""
    from lab.jobs.guard import SubmitBook

    class Stopped(BaseException):
        pass

    def stopped():
        raise Stopped

    book = SubmitBook()
    with pytest.raises(Stopped):
        book.submit_once("s1", SC, "run", RunStore(tmp_path / "runs.db"), stopped)
    assert "s1" not in book.tokens and not book.pending("s1")


def test_the_window_counts_from_when_a_slow_submit_queued_its_run(tmp_path):
    """On a loaded server a submit can take longer than the window, and its run can be stepping before
    the second click of a double click arrives: that click is still a repeat. Once the window has
    passed after the run was queued, the same settings run again."""
    from lab.jobs.guard import SubmitBook

    clock = Clock(100.0)
    store, book, queued = RunStore(tmp_path / "runs.db"), SubmitBook(clock), []

    class Job:
        def __init__(self, rid):
            self.run_id = rid

    def slow():
        clock.t += 2 * WINDOW_S  # builds the model and the data on a busy server
        queued.append(store.create_run(SC))
        store.set_status(queued[-1], "running")
        store.add_metrics(queued[-1], [{"step": 1, "worker": JOB_WORKER, "loss": 2.0}])
        return [Job(queued[-1])]

    assert book.submit_once("s1", SC, "run", store, slow)[0] is not None
    assert phases(store, queued) == {queued[0]: "running"}  # the run has really started
    clock.t += 1.5  # the first click's page drawn, then the second click
    jobs, why = book.submit_once("s1", SC, "run", store, slow)
    assert jobs is None and f"run {queued[0]}" in why and "1.5 s ago" in why
    clock.t += WINDOW_S
    assert book.submit_once("s1", SC, "run", store, slow)[0] is not None and len(queued) == 2
