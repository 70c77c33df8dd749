"""Units that read well, for figures and for the sentences beside them alike: a time, a rate or a size looks
the same on every page (lab.figures.style and the page models in lab.view read them from here)."""

from __future__ import annotations

import math

MIN_VISIBLE = 0.006  # bars shorter than this share of a drawn time axis also get a marker (and the caption says so)


def time_unit(seconds: float) -> tuple[float, str]:
    """(scale, unit) so that ``seconds * scale`` reads well: s, ms, µs or ns."""
    x = abs(seconds) if seconds and math.isfinite(seconds) else 0.0
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if x * scale >= 1.0:
            return scale, unit
    return 1e9, "ns"


def bytes_unit(nbytes: float) -> tuple[float, str]:
    """(scale, unit) so that ``nbytes * scale`` reads well: GB, MB, kB or B (powers of ten)."""
    x = abs(nbytes) if nbytes and math.isfinite(nbytes) else 0.0
    for scale, unit in ((1e-9, "GB"), (1e-6, "MB"), (1e-3, "kB")):
        if x * scale >= 1.0:
            return scale, unit
    return 1.0, "B"


def fmt_seconds(x: float) -> str:
    """A duration with three significant digits in s, ms, µs or ns; ∞ for no finite time."""
    if not math.isfinite(x):
        return "∞"
    if x == 0:
        return "0 s"
    scale, unit = time_unit(x)
    return f"{x * scale:.3g} {unit}"


def fmt_rate(x: float) -> str:
    """A bandwidth with three significant digits in TB/s down to B/s; ∞ for an unlimited one."""
    if not math.isfinite(x):
        return "∞"
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} B/s"


def fmt_bytes(x: float) -> str:
    """A size with three significant digits in GB down to B; "unlimited" for an infinite one."""
    if not math.isfinite(x):
        return "unlimited"
    scale, unit = bytes_unit(x)
    return f"{x * scale:.3g} {unit}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the number it takes: "1 switch", "2 switches", "0 links"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"




def error_pct(measured: float | None, modelled: float | None) -> float | None:
    """How far a model was off, in percent: measured / modelled - 1 (None without both, or with no model)."""
    return 100 * (measured / modelled - 1) if measured is not None and modelled else None


__all__ = ["time_unit", "bytes_unit", "fmt_seconds", "fmt_rate", "fmt_bytes", "counted", "error_pct", "MIN_VISIBLE"]
