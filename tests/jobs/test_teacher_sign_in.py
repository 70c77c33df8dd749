"""Guessing the teacher's token slows down, per client and overall, by the delays the server imposes (a fake
clock: no wall time); a sign-in expires; a weak token is refused at start with how to make one."""
from __future__ import annotations

import logging

import pytest

from lab.errors import LabError
from lab.jobs.access import (CLIENT_MAX_S, MAKE_TEACHER_TOKEN, OVERALL_EVERY, TEACHER_HOURS, Roster,
                             teacher_token_problem)

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


def test_each_wrong_token_doubles_the_clients_wait_and_a_try_meanwhile_is_refused_unread(roster):
    r, clock = roster
    waits = []
    for _ in range(4):
        assert not r.sign_in("guesser", "wrong")
        waits.append(r.wait("guesser"))
        with pytest.raises(LabError, match="try again in"):
            r.sign_in("guesser", TOKEN)  # even the right token waits: a guess would learn nothing from it
        clock.t += waits[-1]
    assert waits == [1.0, 2.0, 4.0, 8.0] and r.wait("guesser") == 0
    assert r.sign_in("guesser", TOKEN) and r.is_teacher("guesser")


def test_a_clients_wait_is_capped_and_other_clients_wait_once_the_server_has_seen_many_wrong_tries(roster):
    r, clock = roster
    for k in range(12):
        assert not r.sign_in("a", "wrong")
        clock.t += r.wait("a")
    assert not r.sign_in("a", "wrong") and r.wait("a") == CLIENT_MAX_S
    assert r.wait("b") > 0  # 13 wrong tries on the server: everyone waits a little
    clock.t += r.wait("b")
    fresh = Roster(clock=clock)
    for k in range(OVERALL_EVERY - 1):  # from many clients, one try each
        assert not fresh.sign_in(f"client{k}", "wrong")
    assert fresh.wait("someone") == 0
    assert not fresh.sign_in("client-last", "wrong")
    assert fresh.wait("someone") == 1.0


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


@pytest.mark.parametrize("token,why", [("short-Tok3n", "11 characters"), ("aaaaaaaaaaaaaaaaaaaa", "too few"),
                                       ("abcdefghijklmnopqrst", "too few"), ("12345678901234567890", "too few")])
def test_a_weak_teacher_token_is_refused_with_how_to_make_one(token, why):
    problem = teacher_token_problem(token)
    assert why in problem and MAKE_TEACHER_TOKEN in problem


def test_a_token_made_the_documented_way_and_no_token_pass():
    import secrets

    for _ in range(200):
        assert teacher_token_problem(secrets.token_urlsafe(24)) is None
    assert teacher_token_problem("") is None and teacher_token_problem(TOKEN) is None
