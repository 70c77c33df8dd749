"""A worker says when its main thread waits for its peers.

Hang detection (:mod:`lab.train.resilience`) tells a worker that waits for the others (a collective, an
emulated link) from one stuck in its own work. The waits say so themselves, with :func:`waiting_for_peers`
around them or :func:`waits_for_peers` on the function, so renaming a function changes nothing in how a
failure is handled. A wait inside torch.distributed counts too (the heartbeat sees it on the stack)."""
from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)
_DEPTH: dict[int, int] = {}  # thread id -> blocks of waiting it is in (read by the heartbeat's thread)
_ENDED: dict[int, int] = {}  # thread id -> waits it has come back from (outermost blocks)


@contextmanager
def waiting_for_peers() -> Iterator[None]:
    """Inside this block the calling thread waits for its peers (nesting allowed)."""
    me = threading.get_ident()
    _DEPTH[me] = _DEPTH.get(me, 0) + 1
    try:
        yield
    finally:
        _DEPTH[me] -= 1
        if not _DEPTH[me]:
            _ENDED[me] = _ENDED.get(me, 0) + 1


def waits_for_peers(fn: F) -> F:
    """``fn`` waits for its peers while it runs (:func:`waiting_for_peers` around every call)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with waiting_for_peers():
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def is_waiting(thread_id: int) -> bool:
    """Whether the thread ``thread_id`` is inside a :func:`waiting_for_peers` block now."""
    return _DEPTH.get(thread_id, 0) > 0


def waits_ended(thread_id: int) -> int:
    """How many waits for peers the thread ``thread_id`` has come back from: a wait that began and ended between
    two looks of the heartbeat is still seen to have ended."""
    return _ENDED.get(thread_id, 0)


__all__ = ["waiting_for_peers", "waits_for_peers", "is_waiting", "waits_ended"]
