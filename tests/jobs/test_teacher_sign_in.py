"""Guessing the teacher's token slows down, per client address and, while many come, for every address that guessed,
by the delays the server imposes (a fake clock: no wall time); a guesser cannot make the teacher wait; a sign-in
expires; a weak token is refused at start with how to make one."""
from __future__ import annotations

import logging

import pytest

from lab.errors import LabError
from lab.jobs.access import (CLIENT_MAX_S, MAKE_TEACHER_TOKEN, OVERALL_EVERY, OVERALL_MAX_S, TEACHER_HOURS,
                             WINDOW_S, Roster, teacher_token_problem)

TOKEN = "Zq3-uV8_kP1wYt6Rb0sLm4"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def roster(monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    clock = Clock()
    return Roster(clock=clock), clock


def test_each_wrong_token_doubles_the_addresss_wait_whatever_identity_tries(roster):
    r, clock = roster
    waits = []
    for k in range(4):  # a fresh identity (a private window) for every try, from one address
        assert not r.sign_in(f"guesser{k}", "wrong", "10.0.0.7")
        waits.append(r.wait("10.0.0.7"))
        with pytest.raises(LabError, match="try again in"):
            r.sign_in(f"guesser{k}b", TOKEN, "10.0.0.7")  # even the right token waits: a guess learns nothing
        clock.t += waits[-1]
    assert waits == [1.0, 2.0, 4.0, 8.0] and r.wait("10.0.0.7") == 0
    assert r.sign_in("guesser", TOKEN, "10.0.0.7") and r.is_teacher("guesser")


def test_an_addresss_wait_is_capped_and_many_wrong_tries_slow_only_the_addresses_that_tried(roster):
    r, clock = roster
    for k in range(12):
        assert not r.sign_in("a", "wrong", "10.0.0.1")
        clock.t += r.wait("10.0.0.1")
    assert not r.sign_in("a", "wrong", "10.0.0.1") and r.wait("10.0.0.1") == CLIENT_MAX_S
    assert r.wait("10.0.0.2") == 0 and r.wait(None) == 0  # the teacher's address typed nothing wrong
    fresh = Roster(clock=clock)
    for k in range(2 * OVERALL_EVERY - 1):  # from many addresses, one try each
        assert not fresh.sign_in("x", "wrong", f"10.1.0.{k}")
    assert fresh.wait("10.1.0.0") == 1.0  # its own first wrong try
    assert not fresh.sign_in("x", "wrong", "10.1.0.99")
    assert fresh.wait("10.1.0.0") == 2.0 and fresh.wait("10.1.0.99") == 2.0  # ten on the server: 2 s each
    assert fresh.wait("10.0.0.2") == 0 and fresh.wait(None) == 0


def test_a_guesser_keeps_trying_for_an_hour_and_the_teacher_signs_in_every_time(roster):
    """A simulated hour of a guesser trying as fast as the server lets it, from its address and from fresh ones
    (one new address a minute): the teacher at this machine and from the classroom's address signs in on every
    try, typo included, and waits at most a minute for a typo only while guesses keep coming."""
    r, clock = roster
    start, refused, tries, typo_waits = clock.t, 0, 0, []
    typo_at = start
    while clock.t < start + 3600:
        for address in ("10.6.6.6", f"10.7.{int(clock.t - start) // 60}.1"):
            if r.wait(address) == 0:
                assert not r.sign_in("guesser", "guess", address)
                tries += 1
        for teacher_at in (None, "10.0.0.2"):
            try:
                assert r.sign_in(f"teacher-{teacher_at}", TOKEN, teacher_at)
            except LabError:
                refused += 1
            r.sign_out(f"teacher-{teacher_at}")
        if clock.t >= typo_at:  # a typo every ten minutes from the classroom's address
            typo_at += 600
            r.sign_out("teacher-typo")
            assert not r.sign_in("teacher-typo", "Zq3-uV8_kP1wYt6Rb0sLm", "10.0.0.3")
            typo_waits.append(r.wait("10.0.0.3"))
            clock.t += r.wait("10.0.0.3")
            assert r.sign_in("teacher-typo", TOKEN, "10.0.0.3")
        clock.t += 5.0
    assert refused == 0 and tries > 50 and len(typo_waits) == 6
    assert max(typo_waits) <= OVERALL_MAX_S


def test_the_servers_window_slides_so_old_guesses_stop_slowing_a_typo(roster):
    r, clock = roster
    for k in range(35):  # 35 wrong tries in the server's life, from 35 addresses
        assert not r.sign_in("x", "wrong", f"10.2.0.{k}")
    assert not r.sign_in("t", "typo", "10.0.0.2") and r.wait("10.0.0.2") == OVERALL_MAX_S
    clock.t += WINDOW_S + 1
    assert not r.sign_in("t", "typo", "10.0.0.2")
    assert r.wait("10.0.0.2") == 2.0  # its own second wrong try; the guesses are out of the window


def test_a_signed_in_teacher_never_waits_for_a_guesser_beside_them(roster):
    r, clock = roster
    assert r.sign_in("teacher", TOKEN, "10.0.0.5")
    for _ in range(20):  # the same address (one NAT): a student guesses
        clock.t += r.wait("10.0.0.5")
        assert not r.sign_in("student", "guess", "10.0.0.5")
    assert r.wait("10.0.0.5") == CLIENT_MAX_S
    assert r.sign_in("teacher", TOKEN, "10.0.0.5") and r.is_teacher("teacher")


def test_a_failed_sign_in_is_logged_without_the_guess(roster, caplog):
    r, _ = roster
    with caplog.at_level(logging.WARNING, logger="lab.jobs.access"):
        r.sign_in("guesser", "my-secret-guess-42")
    assert "failed" in caplog.text and "my-secret-guess-42" not in caplog.text


def test_a_teachers_sign_in_expires_and_can_be_signed_out(roster):
    r, clock = roster
    assert r.sign_in("t", TOKEN)
    clock.t += TEACHER_HOURS * 3600 - 1
    assert r.is_teacher("t")
    clock.t += 2
    assert not r.is_teacher("t")
    assert r.sign_in("t", TOKEN)
    r.sign_out("t")
    assert not r.is_teacher("t")


@pytest.mark.parametrize("token,why", [("short-Tok3n", "11 characters"), ("aaaaaaaaaaaaaaaaaaaa", "a repeat"),
                                       ("abcdefghijklmnopqrst", "a sequence"), ("12345678901234567890", "guesses"),
                                       ("Password12345678", "common words"), ("Summer2026Summer", "a date"),
                                       ("qwertyuiopasdfghjkl", "guesses"), ("zxcvbnm,./asdfghjkl", "a keyboard walk")])
def test_a_weak_teacher_token_is_refused_with_how_to_make_one(token, why):
    problem = teacher_token_problem(token)
    assert why in problem and MAKE_TEACHER_TOKEN in problem


def test_a_token_made_the_documented_way_and_no_token_pass():
    import secrets

    for _ in range(200):
        assert teacher_token_problem(secrets.token_urlsafe(24)) is None
    assert teacher_token_problem("") is None and teacher_token_problem(TOKEN) is None
