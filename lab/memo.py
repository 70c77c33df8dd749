"""Values kept per key in this server process, shared by every session: what many students ask for at once (a class
opening one link) is computed once, the others waiting for it, and the keys used last are kept."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable


class SharedCache:
    """At most ``size`` values, the least recently used dropped first. A key asked for while another session
    computes it waits for that value instead of computing it again. Keep values that no caller changes."""

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._building: dict[Hashable, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value kept for ``key``, made by ``make()`` once when it is not kept."""
        with self._guard:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            lock = self._building.setdefault(key, threading.Lock())
        with lock:
            with self._guard:
                if key in self._values:
                    return self._values[key]
            value = make()  # a failure leaves nothing kept: the next ask tries again
            with self._guard:
                self._values[key] = value
                while len(self._values) > self.size:
                    self._values.popitem(last=False)
                self._building.pop(key, None)
        return value

    def clear(self) -> None:
        with self._guard:
            self._values.clear()


__all__ = ["SharedCache"]
