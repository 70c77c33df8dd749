"""The All-reduce page's tables, built from the model's and the measurement's numbers: the messages of
one step, the bytes each device moves, the time of every step, the four algorithms side by side, each
device's idle time under a trigger, and the measured times beside the fitted model. Each is a list of rows
(a section's table), but for the compute times, which the page edits (a DataFrame)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd

from lab.scenario.names import ALGORITHM_LABELS
from lab.modelled.collectives.ring import ring_share


def transfers_table(sched: Any, step: int) -> list[dict]:
    """The messages of step ``step`` (1-based): who sends which chunk, what it holds, and what the receiver does."""
    prev = sched.state_at(step - 1)
    return [{"from": sched.nodes[t.src], "to": sched.nodes[t.dst], "chunk": t.chunk,
                          "content sent": sched.label(prev[t.src][t.chunk], t.chunk, 8),
                          "bytes (B)": t.nbytes, "operation": "add" if t.op == "reduce" else "copy"}
                         for t in sched.steps[step - 1].transfers]


def bytes_table(sched: Any, nbytes: int) -> list[dict]:
    """Bytes each device sends and receives over the whole all-reduce, and what it sends as a share of S."""
    return [{"device": d, "sent (B)": s, "received (B)": r, "sent / S": s / max(1, nbytes)}
            for d, s, r in zip(sched.nodes, sched.sent_bytes(), sched.received_bytes())]


def ring_bytes_sentence(devices: int) -> str:
    return (f"bytes each node sends and receives in the whole all-reduce; a ring sends 2(N−1)/N × S = "
            f"{ring_share(devices):.3g} × S per device.")


def step_times_table(est: Any, scale: float, unit: str) -> list[dict]:
    """Every step's time, its slowest message and that message's narrowest hop."""
    return [{"step": s.index + 1, "phase": s.phase, f"time ({unit})": s.seconds * scale,
                          "slowest message": f"{s.slowest.src} → {s.slowest.dst}" if s.slowest else "",
                          "its narrowest hop": s.slowest.bottleneck if s.slowest else "",
                          "messages sharing it": s.slowest.sharing if s.slowest else 0,
                          "its bandwidth (GB/s)": s.slowest.bandwidth / 1e9 if s.slowest else None}
                         for s in est.steps]


def algorithms_table(rows: Sequence[Mapping]) -> list[dict]:
    """The algorithms side by side (:func:`lab.modelled.collectives.compare_algorithms`)."""
    return [{"algorithm": ALGORITHM_LABELS[r["algorithm"]], "steps": r["steps"],
                          "time (µs)": r["seconds"] * 1e6, "algbw (GB/s)": r["algbw"] / 1e9,
                          "busbw (GB/s)": r["busbw"] / 1e9, "slowest link": r["bottleneck"]} for r in rows]


def compute_table(names: Sequence[str], compute_s: Mapping[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"device": list(names), "compute (ms)": [compute_s[x] * 1e3 for x in names]})


def compute_from_table(edited: pd.DataFrame) -> dict[str, float]:
    """Seconds of compute per device from the page's edited table (milliseconds)."""
    return {d: float(t) / 1e3 for d, t in zip(edited["device"], edited["compute (ms)"])}


def idle_table(timelines: Mapping[str, Any], nodes: Sequence[str], scale: float, unit: str) -> list[dict]:
    """Each device's idle time and end under each trigger (sync, async)."""
    return [{"device": d, **{f"{m}: idle ({unit})": timelines[m].idle[d] * scale for m in timelines},
                          **{f"{m}: done at ({unit})": timelines[m].end[d] * scale for m in timelines}}
                         for d in nodes]


def measured_table(measured: Sequence[Mapping], fits: Mapping[str, Any], impl_labels: Mapping[str, str]) -> list[dict]:
    """Each measured size and implementation beside the fitted α-β model's time and its error (empty cells for
    an implementation whose fit is None: one that cannot be right)."""
    table = []
    for r in measured:
        fit = fits[r["impl"]]
        pred = fit.predicted[fit.sizes.index(r["size"])] if fit is not None else None
        table.append({"size (B)": r["size"], "implementation": impl_labels[r["impl"]],
                      "measured time (µs)": r["time"] * 1e6, "modelled time (µs)": None if pred is None else pred * 1e6,
                      "model error (%)": None if pred is None else 100 * (pred / r["time"] - 1),
                      "algbw (GB/s)": r["algbw"] / 1e9, "busbw (GB/s)": r["busbw"] / 1e9})
    return table
