"""Who a person is on the class server, and who may manage a run: its owner or the teacher.

A student is known by a secret token that their browser keeps (the app issues it once and keeps it in
a cookie); the lab never shows that token. What the store and the pages show is the owner id, a
one-way digest of the token, so reading an owner id off the page (in "stopped by session ...") does
not let anyone act as that owner. A cookie rather than the link: a link is made to be shared (the
sidebar puts the whole view in it), and whoever opened a shared link would become its sender.

The teacher holds LAB_TEACHER_TOKEN and types it once into the Jobs page's sign-in; the server then
remembers that owner id as the teacher (:class:`Roster`), so a reload or a second tab keeps it, and
the token never enters an address, a browser's history or a server log.

Every call that stops, releases, deletes or changes a run goes through :func:`check_manage`, here in
the library, so no page can skip it.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import math
import re
import secrets
import threading
import time
from collections import deque
from typing import Callable, Iterable, Mapping

from lab import settings
from lab.errors import LabError

log = logging.getLogger("lab.jobs.access")

TEACHER = "teacher"  # how the store names the teacher as the one who stopped or released a job
ANONYMOUS = "-"  # an owner that no browser holds (a job queued by a script through the manager)
COOKIE = "lab_student"  # the browser's cookie that holds a student's token
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}\.[A-Za-z0-9_-]{22}")
KEY_FILE = "identity.key"  # in the data folder: the server's secret that signs the tokens it issues
_keys: dict[str, bytes] = {}
_keys_lock = threading.Lock()


def _server_key() -> bytes:
    """The server's signing secret, made once (32 random bytes, readable by its owner only) and kept in the data
    folder, so tokens stay valid across restarts and are the same for every process of this server."""
    path = settings.data_dir() / KEY_FILE
    with _keys_lock:
        key = _keys.get(str(path))
        if key is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                key = b""
                for _ in range(50):  # another process is writing it
                    key = path.read_bytes()
                    if len(key) == 32:
                        break
                    time.sleep(0.02)
            else:
                key = secrets.token_bytes(32)
                with os.fdopen(fd, "wb") as f:
                    f.write(key)
            if len(key) != 32:
                raise LabError(f"the server's identity key {path} is damaged: delete it (every student then gets a "
                               "new identity)", where="identity")
            _keys[str(path)] = key
        return key


def _signature(body: str) -> str:
    mac = hmac.new(_server_key(), b"hetlab-student:" + body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:16]).decode().rstrip("=")


def new_token() -> str:
    """A student's secret, issued by this server: 32 random bytes (43 URL-safe characters), a dot, and the
    server's signature of them (22 characters), so that a value the server did not issue is no student."""
    body = secrets.token_urlsafe(32)
    return f"{body}.{_signature(body)}"


def valid_token(token) -> bool:
    """Whether ``token`` is one this server issued (its form, and its signature checked in constant time);
    anything else is a new visitor, never a student someone chose."""
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        return False
    body, sig = token.split(".")
    return hmac.compare_digest(sig, _signature(body))


def owner_id(token: str) -> str:
    """The public owner id of a student's token: 12 hex digits of its SHA-256, so that the id, which the
    pages and the store show, does not give the token back."""
    if not valid_token(token):
        raise LabError("a student token must be one this server issued", where="identity")
    return hashlib.sha256(b"hetlab-owner:" + token.encode()).hexdigest()[:12]


def teacher_token() -> str:
    """The server's teacher secret (LAB_TEACHER_TOKEN); empty: there is no teacher."""
    return settings.raw("LAB_TEACHER_TOKEN")


TEACHER_TOKEN_MIN = 16
#: The fewest guesses (log10) zxcvbn may estimate for a teacher token: it finds a word, a date, a keyboard walk or a
#: repeat inside a token ("Password12345678": 10^4, "Summer2026Summer": 10^9), which a count of characters misses.
TEACHER_TOKEN_GUESSES_LOG10 = 12.0
PATTERNS = {"dictionary": "common words or passwords", "date": "a date", "repeat": "a repeat",
            "sequence": "a sequence", "spatial": "a keyboard walk", "regex": "a pattern"}  # zxcvbn's, in words
MAKE_TEACHER_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(24))"'


def make_teacher_token() -> str:
    """A strong teacher token (24 random bytes, 32 URL-safe characters), the one :data:`MAKE_TEACHER_TOKEN` makes."""
    return secrets.token_urlsafe(24)


def teacher_token_problem(token: str) -> str | None:
    """Why ``token`` may not be the teacher's (too short, or a guess would find it: a common password, words,
    dates, repeats), or None. An empty token is no teacher, which is allowed on a server that listens on this
    machine only."""
    if not token:
        return None
    why = None
    if len(token) < TEACHER_TOKEN_MIN:
        why = f"has {len(token)} characters, and a teacher token needs at least {TEACHER_TOKEN_MIN}"
    else:
        from zxcvbn import zxcvbn

        found = zxcvbn(token[:100])  # its matching grows with the length; 100 characters decide any token
        if found["guesses_log10"] < TEACHER_TOKEN_GUESSES_LOG10:
            kinds = sorted({PATTERNS.get(m["pattern"], m["pattern"]) for m in found["sequence"]
                            if m["pattern"] != "bruteforce"})
            how = f" (it is made of {', '.join(kinds)})" if kinds else ""
            why = (f"would be found in about 10^{found['guesses_log10']:.0f} guesses{how}, and a teacher token "
                   f"needs 10^{TEACHER_TOKEN_GUESSES_LOG10:.0f}")
    return None if why is None else f"LAB_TEACHER_TOKEN {why}: make one with {MAKE_TEACHER_TOKEN}"


def is_teacher(claim) -> bool:
    """Whether ``claim`` (typed into the sign-in) is the server's teacher token. Compared in
    constant time; no token set on the server, or none claimed: False."""
    token = teacher_token()
    if not token or not isinstance(claim, str) or not claim:
        return False
    return hmac.compare_digest(claim.encode(), token.encode())


class RateBound:
    """How fast one client address may take something new (an identity, a seat): ``burst`` at once, then one
    every ``every_s`` seconds (a token bucket per address). This machine itself (``None``: Streamlit gives no
    address for a browser on localhost) is not bounded: whoever sits at the server owns it.

    A turn taken ahead (:meth:`take` with ``ahead``) is a debt, and the debt has a floor of one burst: a script
    that takes a thousand turns leaves the next person from its address waiting at most (burst + 1) periods, not
    a thousand."""

    def __init__(self, burst: int, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or not every_s > 0:
            raise LabError(f"a rate bound needs a burst of at least 1 and a positive period (got {burst}, "
                           f"{every_s})", where="settings")
        self.burst, self.every_s, self._clock = int(burst), float(every_s), clock
        self.floor = -float(self.burst)  # the deepest debt an address may run up
        self._left: dict[str, tuple[float, float]] = {}  # client -> (tokens, at); below 0: taken ahead
        self._lock = threading.Lock()

    @property
    def longest_wait_s(self) -> float:
        """The longest anyone from one address waits, however many turns were taken ahead from it."""
        return (1.0 - self.floor) * self.every_s

    def take(self, client: str | None, *, ahead: bool = False) -> float:
        """Take one for ``client``: 0.0 when it may now (and it is counted), else the seconds until it may. With
        ``ahead`` it is counted anyway, as a turn that comes after the ones already taken (an identity made now
        that may act later), down to the floor; without, a refusal counts nothing."""
        if client is None:
            return 0.0
        now = self._clock()
        with self._lock:
            for c, (t, at) in list(self._left.items()):  # addresses back at a full burst are forgotten
                if t + (now - at) / self.every_s >= self.burst:
                    del self._left[c]
            tokens, at = self._left.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) / self.every_s)
            wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) * self.every_s
            if wait == 0.0 or ahead:
                tokens = max(self.floor, tokens - 1.0)
            self._left[client] = (tokens, now)
            return wait


#: Headers a reverse proxy adds. A request from this machine that carries one came through a proxy.
PROXY_HEADERS = ("x-forwarded-for", "x-real-ip", "forwarded", "via", "x-forwarded-host", "x-forwarded-proto")
#: The one address every browser behind a proxy counts as when the proxy gives none the lab may read: a
#: proxy nobody declared (LAB_PROXY unset), or a declared one that sends no X-Forwarded-For.
UNDECLARED_PROXY = "a reverse proxy nobody declared (LAB_PROXY)"
NO_ADDRESS = "a reverse proxy that sends no client address"
PROXY_LINES = ("nginx: proxy_set_header X-Forwarded-For $remote_addr; Caddy: reverse_proxy sets it itself")


def client_address(peer: str | None, headers: Mapping[str, str], behind_proxy: bool) -> str | None:
    """The address a browser's requests are counted by (None: this machine, which is not bounded).

    ``peer`` is the address the connection came from (None: this machine). A browser that reached the server
    directly is its ``peer``: no header it writes changes that. From this machine, behind a declared proxy
    (``behind_proxy``, LAB_PROXY) the address is the last in X-Forwarded-For, the one the proxy wrote (a browser's
    own entries come before it); without it every browser counts as :data:`NO_ADDRESS`, one address, and may not
    join a class. With no proxy declared, X-Forwarded-For is anyone's text and is never read; a request that
    carries a proxy's headers counts as :data:`UNDECLARED_PROXY`, one address, not as this machine."""
    if peer is not None:
        return str(peer)[:64]
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    if behind_proxy:
        last = lower.get("x-forwarded-for", "").split(",")[-1].strip()[:64]
        return last or NO_ADDRESS
    if any(lower.get(h) for h in PROXY_HEADERS):
        return UNDECLARED_PROXY
    return None


def client_bound() -> RateBound:
    """A bound on new identities or seats per client address, from LAB_NEW_PER_CLIENT and LAB_NEW_EVERY_S."""
    return RateBound(settings.integer("LAB_NEW_PER_CLIENT"), settings.number("LAB_NEW_EVERY_S"))


#: A client address's wait after its k-th wrong sign-in is 2^(k-1) s up to this; it forgets them after
#: CLIENT_FORGET_S without a wrong try.
CLIENT_MAX_S = 300.0
CLIENT_FORGET_S = 3600.0
#: The whole server counts wrong tries (of any address) over the last WINDOW_S; with n of them, an address that
#: itself tried wrong in that window waits 2^(n // OVERALL_EVERY - 1) s (up to OVERALL_MAX_S) after its last, so
#: guessing from many addresses slows too. The window slides: a guesser's tries stop counting WINDOW_S later,
#: and an address that typed no wrong token (the teacher's) never waits for anyone else's.
OVERALL_EVERY = 5
OVERALL_MAX_S = 60.0
WINDOW_S = 600.0
TEACHER_HOURS = 12.0  # a teacher's sign-in lasts this long, then they sign in again
THIS_MACHINE = "this machine"  # how the sign-in's waits name a browser on the server's own machine


class Roster:
    """The owner ids that signed in as the teacher, for this server process: a reload or a second tab
    of the same browser keeps its owner id, so it stays the teacher, for :data:`TEACHER_HOURS` or until they
    sign out. A restart of the server forgets them (the teacher signs in again), and so does a change of
    LAB_TEACHER_TOKEN. Wrong tokens slow the next try from the same client address down, and, while many come
    from anywhere, from every address that typed one; a student's fresh identity per try changes nothing, and an
    owner already signed in, or a browser on the server's own machine, never waits. The log says that a sign-in failed, never what was typed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._teachers: dict[str, tuple[str, float]] = {}  # owner id -> (digest of its token, signed in at)
        self._lock = threading.Lock()
        self._clock = clock
        self._fails: dict[str, tuple[int, float, float]] = {}  # address -> (wrong tries, may try again at, last)
        self._recent: deque[float] = deque()  # when the server's wrong tries of the last WINDOW_S were

    @staticmethod
    def _digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    @staticmethod
    def _key(client: str | None) -> str:
        return THIS_MACHINE if client is None else str(client)[:64]

    def _forget(self, now: float) -> None:
        while self._recent and self._recent[0] <= now - WINDOW_S:
            self._recent.popleft()
        for c in [c for c, (_, _, last) in self._fails.items() if last <= now - CLIENT_FORGET_S]:
            del self._fails[c]

    def wait(self, client: str | None) -> float:
        """Seconds before a sign-in from ``client`` (an address; None: this machine) may be tried (0: now). This
        machine never waits: whoever sits at the server owns it (and could read the token where it is set)."""
        if client is None:
            return 0.0
        now = self._clock()
        with self._lock:
            self._forget(now)
            k, until, last = self._fails.get(self._key(client), (0, -math.inf, -math.inf))
            n = len(self._recent)
            if k and last > now - WINDOW_S and n >= OVERALL_EVERY:
                until = max(until, last + min(2.0 ** (n // OVERALL_EVERY - 1), OVERALL_MAX_S))
        return max(0.0, until - now)

    def sign_in(self, owner: str, claim, client: str | None = None) -> bool:
        """Make ``owner`` the teacher when ``claim`` is the teacher token; returns whether it was. An owner already
        signed in is the teacher at once. A try while the server makes ``client`` wait is refused unread (a
        LabError saying how long)."""
        if not owner or owner == ANONYMOUS:
            return False
        if self.is_teacher(owner):
            return True
        left = self.wait(client)
        if left > 0:
            raise LabError(f"too many wrong teacher tokens from this address: try again in {math.ceil(left)} s",
                           where="sign-in")
        now = self._clock()
        if not is_teacher(claim):
            key = self._key(client)
            if client is None:
                log.warning("a teacher sign-in failed (address %s)", key)
                return False
            with self._lock:
                k = self._fails.get(key, (0, 0.0, 0.0))[0] + 1
                self._fails[key] = (k, now + min(2.0 ** (k - 1), CLIENT_MAX_S), now)
                self._recent.append(now)
                n = len(self._recent)
            log.warning("a teacher sign-in failed (address %s, its try %d; %d on the server in %d s)", key, k, n,
                        WINDOW_S)
            return False
        with self._lock:
            self._teachers[str(owner)] = (self._digest(teacher_token()), now)
            self._fails.pop(self._key(client), None)
        return True

    def sign_out(self, owner: str) -> None:
        with self._lock:
            self._teachers.pop(str(owner), None)

    def is_teacher(self, owner: str | None) -> bool:
        token = teacher_token()
        if not owner or not token:
            return False
        with self._lock:
            held = self._teachers.get(str(owner))
            if held is not None and self._clock() - held[1] > TEACHER_HOURS * 3600:
                del self._teachers[str(owner)]  # expired: the teacher signs in again
                held = None
        return held is not None and hmac.compare_digest(held[0], self._digest(token))


def can_manage(run_owner: str | None, owner: str | None, teacher: bool = False) -> bool:
    """Whether ``owner`` (acting, with the teacher flag) may stop, release, delete or change a run of
    ``run_owner``: its own (never a command-line run, which has no owner), or any when the teacher."""
    return bool(teacher) or (run_owner is not None and owner is not None and str(owner) == str(run_owner))


def whose(run_owner: str | None) -> str:
    """How a refusal names a run that is not the actor's."""
    return "a command-line run" if run_owner is None else "another session's job"


def check_manage(run_id: str, run_owner: str | None, owner: str | None, teacher: bool, what: str) -> None:
    """A LabError unless ``owner`` may ``what`` (stop, release, delete...) run ``run_id``."""
    if not can_manage(run_owner, owner, teacher):
        raise LabError(f"run {run_id} is {whose(run_owner)}: only its own session or the teacher may {what} it",
                       where="jobs")


def delete_runs(store, run_ids: Iterable[str], owner: str | None, *, teacher: bool = False,
                active: Iterable[str] = ()) -> list[str]:
    """Delete runs for ``owner``: every one must be theirs (or the actor the teacher) and finished, or
    none is deleted (a LabError names the first that is not). ``active``: runs the caller knows are
    queued or running beyond what the store says. Returns the ids deleted."""
    ids = list(dict.fromkeys(str(r) for r in run_ids))
    busy = set(active)
    runs = []
    for rid in ids:
        run = store.get_run(rid)
        check_manage(rid, run["info"].get("owner"), owner, teacher, "delete")
        if run["status"] in ("queued", "running") or rid in busy:
            raise LabError(f"run {rid} is {run['status']}: stop it before deleting it", where="jobs")
        runs.append(rid)
    for rid in runs:
        store.delete_run(rid)
    return runs


__all__ = ["ANONYMOUS", "COOKIE", "MAKE_TEACHER_TOKEN", "TEACHER", "TEACHER_HOURS", "RateBound", "Roster", "client_bound", "teacher_token_problem", "can_manage", "check_manage", "delete_runs", "is_teacher",
           "new_token", "owner_id", "teacher_token", "valid_token", "whose"]
