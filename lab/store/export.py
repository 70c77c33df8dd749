"""File names for what a page hands out as a download: nothing a user typed can leave its folder."""

from __future__ import annotations

import re


def safe_filename(name: str, suffix: str, fallback: str = "export") -> str:
    """A file name made only of letters, digits, '.', '_' and '-', that cannot leave its folder."""
    if not suffix.startswith("."):
        suffix = "." + suffix
    name = str(name or "")
    if name.lower().endswith(suffix.lower()):
        name = name[: -len(suffix)]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:100] or fallback
    return stem + suffix
