"""What a report is made from and written to: the one link a report carries (the one that reopens its view) and
the link the command line reads are a page address of the lab, so an ``http`` or ``https`` address with a host
and nothing else; the file the command line writes is in a folder that exists and may be written. A report is made to be
handed on, and a ``javascript:`` or ``data:`` address behind "Reopen this view" would run in the reader's browser
when clicked; a ``file:`` one would open the reader's own files.

The scheme is matched as written, lower case and first: a browser drops leading spaces and control characters
and reads ``JaVaScRiPt:`` as ``javascript:``, so anything but ``http://`` or ``https://`` at the very start is
refused rather than cleaned up."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit

from lab.errors import LabError
from lab.scenario.text import shown

SCHEMES = ("http", "https")


def check_link(link: object) -> str:
    """``link`` as it is when it is an ``http`` or ``https`` address with a host; else a LabError saying why."""
    if not isinstance(link, str) or not link:
        raise LabError(f"a link must be non-empty text (got {shown(link, 40)})")
    if not link.startswith(tuple(f"{s}://" for s in SCHEMES)):
        raise LabError(f"only an http:// or https:// address is a page link of the lab (got {shown(link, 60)})")
    for ch in link:
        # A browser strips tabs and newlines inside an address and shows format characters as nothing, so the
        # address it opens would not be the one the report shows.
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise LabError(f"a link holds a space or an invisible character (U+{ord(ch):04X})")
    try:
        parts = urlsplit(link)
        parts.port  # a port that is no number raises here
    except ValueError as exc:
        raise LabError(f"this is not a link: {exc}") from None
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise LabError(f"a page link names its server, as http://localhost:8501/placement?... does (got "
                       f"{shown(link, 60)})")
    if "@" in parts.netloc:
        # http://localhost:8501@elsewhere.example goes to elsewhere.example: a lab link carries no user name
        raise LabError("a page link carries no user name or password before its server")
    return link


def check_out(path: str | os.PathLike) -> Path:
    """``path`` as a Path when a report can be written there: its folder exists and takes a new file, or it is a
    file that may be replaced; else a LabError saying why (before a page runs for minutes to make the report)."""
    out = Path(path)
    folder = out.parent
    if not folder.is_dir():
        raise LabError(f"--out: the folder {shown(str(folder), 80)} does not exist (make it first)")
    if out.is_dir():
        raise LabError(f"--out: {shown(str(out), 80)} is a folder; name the HTML file to write")
    if not os.access(out if out.exists() else folder, os.W_OK):
        raise LabError(f"--out: {shown(str(out), 80)} cannot be written")
    return out


def safe_link(link: object) -> str | None:
    """``link`` when :func:`check_link` accepts it, else None (a report then leaves the link out)."""
    try:
        return check_link(link)
    except LabError:
        return None


__all__ = ["SCHEMES", "check_link", "check_out", "safe_link"]
