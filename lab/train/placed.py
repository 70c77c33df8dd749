"""A placement run's processes as its plan decided them at submit: each rank's device and the messages per step
between each pair of ranks. It travels in the job spec, so the launcher neither traces nor cuts the model again to
pin the ranks to cores or to name the device of a rank that failed. No torch here: the job manager imports it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.errors import LabError


@dataclass(frozen=True)
class PlacedRanks:
    """Rank ``r`` runs the stretches of ``devices[r]``; ``messages``: ``(a, b, count)`` per pair of ranks ``a < b``
    that exchange ``count`` messages in a training step (the partners the cores keep apart)."""

    devices: tuple[str, ...]
    messages: tuple[tuple[int, int, int], ...] = ()

    def to_dict(self) -> dict:
        return {"devices": list(self.devices), "messages": [list(m) for m in self.messages]}

    @classmethod
    def from_dict(cls, d: Any) -> "PlacedRanks":
        """The record of a job spec; a malformed one is refused with why."""
        try:
            devices = d["devices"]
            if not isinstance(devices, list) or not devices or not all(isinstance(x, str) for x in devices):
                raise ValueError("its devices must be a list of device names")
            n = len(devices)
            messages = []
            for m in d.get("messages") or []:
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in m):
                    raise ValueError(f"message count {m!r} must be three whole numbers")
                a, b, count = m
                if not (0 <= a < b < n and count >= 0):
                    raise ValueError(f"message count {m!r} names no pair of its {n} ranks")
                messages.append((a, b, count))
        except (KeyError, TypeError, ValueError) as exc:
            raise LabError(f"a malformed placement in the job spec: {exc}", where="job spec") from None
        return cls(tuple(devices), tuple(messages))

    def cores(self, cpus: list[int], policy: str | None = None) -> list[int | None]:
        """The core of each rank given the job's cores ``cpus`` (the job manager's turns), or None for a rank left to
        the kernel, by ``policy`` (default :data:`lab.modelled.placement.cores.DEFAULT_RANK_POLICY`; bench_pinning.py
        measured the policies side by side)."""
        from lab.modelled.placement.cores import DEFAULT_RANK_POLICY, rank_cores  # the package loads torch

        distinct = list(dict.fromkeys(cpus))
        weights = {(a, b): n for a, b, n in self.messages}
        return [None if c is None else distinct[c] for c in
                rank_cores(len(self.devices), len(distinct), weights, policy or DEFAULT_RANK_POLICY)]


__all__ = ["PlacedRanks"]
