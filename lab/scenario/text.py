"""Text that comes from outside the lab: names, free text, quoted values and JSON, checked in one place.

* :func:`loads` reads JSON a person supplied (a scenario or topology file, a link): a key that appears
  twice in one object is refused (JSON would keep the last silently), and so is nesting deeper than
  :data:`MAX_DEPTH` (checked without recursion, before anything quotes the value).
* :func:`check_text` checks free text, :func:`check_name` a name, and :func:`check_distinct` that the
  names of one namespace (the devices and switches of a topology, its pools, pinned operators, a class's
  seats) do not merely *look* different: two names that :func:`look_alike` finds alike (equal but for case,
  spaces, invisible characters and combining marks, or letter for letter by their :func:`skeleton`) are
  refused side by side.
* :func:`shown` quotes a value in a message, cut to a few dozen characters however large or deeply
  nested the value is.
* :class:`Withheld` marks text a page shows and a report leaves out.

The look-alike letters come from Unicode's confusables data (UTS #39) as the package
``confusable-homoglyphs`` ships it; :func:`skeleton` builds its table from that data once.
"""

from __future__ import annotations

import json
import re
import reprlib
import unicodedata
from functools import lru_cache
from typing import Any, Iterable

from lab.errors import LabError

NAME_MAX = 64
RUN_NAME_MAX = 200  # a run's name holds its settings (a comparison names optimiser, compression and seed)
MAX_DEPTH = 32  # a scenario is 5 levels deep; nothing the lab reads needs more than a few
# Lists and objects in one document: a topology at its caps (256 devices, 64 switches, 1,024 links) holds
# a few thousand; more is refused before parsing, which would otherwise cost seconds for a 5 MB file.
MAX_CONTAINERS = 50_000
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included

# Unicode's Bidi_Control characters: embeddings, overrides, isolates and the direction marks (LRM, RLM,
# the Arabic letter mark), each of which reorders what is shown around it.
_BIDI = (frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
         | frozenset({0x200E, 0x200F, 0x061C}))
# Characters that show nothing: Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), which
# holds the zero-width spaces and joiners, the word joiner and invisible operators, the byte order mark, the
# soft hyphen, the combining grapheme joiner, the Khmer inherent vowels (U+17B4, U+17B5), the Mongolian
# separators and variation selectors, the Hangul fillers (letters by category that are drawn as nothing), the
# shorthand format controls, the musical format controls and the tags; a font draws none of them.
_IGNORABLE_RANGES = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))
_INVISIBLE = frozenset(o for lo, hi in _IGNORABLE_RANGES for o in range(lo, hi + 1))
# Drawn as an empty cell, as a space is (braille blank; the musical null notehead): set aside as a space is.
_BLANK = frozenset({0x2800, 0x1D159})


# ---------------------------------------------------------------------------------------------
# Quoting
# ---------------------------------------------------------------------------------------------
class _Brief(reprlib.Repr):
    """``repr`` that stops at a few levels, items and characters, so a quote costs little whatever it quotes."""

    def __init__(self, limit: int):
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = 6
        self.maxset = self.maxfrozenset = self.maxdeque = 6
        self.maxstring = self.maxother = max(8, limit)
        self.maxlong = 40

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[:self.maxstring + 1])  # the caller cuts it to the limit

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:  # Python refuses to print integers of more than 4300 digits
            return f"<an integer of about {int(x.bit_length() * 0.30103)} digits>"
        return repr(x)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (with "…"), for messages that quote what a person
    supplied. Never fails and never costs more than a few items of the value, however large or deep."""
    try:
        r = _Brief(limit).repr(value)
    except Exception:  # noqa: BLE001 - a value whose own repr fails is named by its type
        r = f"<{type(value).__name__}>"
    return r if len(r) <= limit else r[:limit - 1] + "…"


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------
def check_depth(value: Any, where: str | None = None, limit: int = MAX_DEPTH) -> Any:
    """``value`` as it is when its lists and objects nest at most ``limit`` levels; else a LabError.
    Iterative: a value nested a thousand levels is refused without deep recursion."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            items = v.values()
        elif isinstance(v, (list, tuple)):
            items = v
        else:
            continue
        if depth > limit:
            raise LabError(f"the data is nested more than {limit} levels deep; nothing here needs that many",
                           where=where)
        stack.extend((x, depth + 1) for x in items if isinstance(x, (dict, list, tuple)))
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise LabError(f"the key {shown(k)} appears twice in one object; every key may appear once "
                           "(JSON would keep only the last)")
        out[k] = v
    return out


def _finite_only(name: str) -> Any:
    raise ValueError(f"{name} is not a number this lab accepts")


def _shape(text: str | bytes) -> tuple[int, int]:
    """(lists and objects, deepest nesting) of JSON text, read without parsing it: strings are
    dropped, then the brackets are counted in one vectorised pass."""
    import numpy as np

    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if b'"' in raw:
        raw = _STRING.sub(b'""', raw)
    b = np.frombuffer(raw, dtype=np.uint8)
    opens = (b == ord("[")) | (b == ord("{"))
    step = opens.astype(np.int32) - ((b == ord("]")) | (b == ord("}")))
    n = int(opens.sum())
    return n, int(np.cumsum(step).max()) if n else 0


def loads(text: str | bytes, *, where: str | None = None, unique: bool = True, finite: bool = False) -> Any:
    """JSON text as Python values, or a LabError: not JSON, more than :data:`MAX_CONTAINERS` lists
    and objects or nested deeper than :data:`MAX_DEPTH` (both found before parsing), a key twice in
    one object (``unique``), NaN or Infinity (``finite``)."""
    containers, depth = _shape(text)
    if depth > MAX_DEPTH:
        raise LabError(f"the data is nested more than {MAX_DEPTH} levels deep; nothing here needs that many",
                       where=where)
    if containers > MAX_CONTAINERS:
        raise LabError(f"the data holds {containers:,} lists and objects; at most {MAX_CONTAINERS:,} are read "
                       "(a topology at the lab's caps needs a few thousand)", where=where)
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys if unique else None,
                          parse_constant=_finite_only if finite else None)
    except LabError as exc:
        raise LabError(str(exc), where=where) from None
    except RecursionError:
        raise LabError(f"the data is nested more than {MAX_DEPTH} levels deep; nothing here needs that many",
                       where=where) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, integers too long to read
        raise LabError(f"not valid JSON: {str(exc)[:200]}", where=where) from None
    return check_depth(data, where)


# ---------------------------------------------------------------------------------------------
# Text and names
# ---------------------------------------------------------------------------------------------
def nfc(text: Any) -> Any:
    """``text`` in Unicode's composed form (NFC); anything else as it is (the checks refuse it)."""
    if isinstance(text, str) and not unicodedata.is_normalized("NFC", text):
        return unicodedata.normalize("NFC", text)
    return text


# What a reader cannot see between or on letters: every space (a hair space is as wide as a hair), line and
# paragraph separators, controls (tabs, newlines), format characters, and combining marks, which sit on the
# letter before them (a dot above, an accent, an enclosing circle) and are easily lost at a name's size.
_UNSEEN_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Mc", "Me"})


def _bare(text: str) -> str:
    """``text`` with only what a reader tells names apart by: decomposed (NFKD: a full-width letter is a letter,
    an accented letter a letter and its accent), every space, invisible character, blank cell and combining mark
    dropped, then composed again (NFKC)."""
    s = unicodedata.normalize("NFKD", text)
    s = "".join(ch for ch in s if ord(ch) not in _INVISIBLE and ord(ch) not in _BLANK
                and unicodedata.category(ch) not in _UNSEEN_CATEGORIES)
    return unicodedata.normalize("NFKC", s)


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing a reader can tell apart: no letter, digit, punctuation or symbol
    once invisible characters, Hangul fillers, braille blanks, spaces and combining marks are gone (marks
    alone have nothing to sit on)."""
    return not any(unicodedata.category(ch)[0] in "LNPS" for ch in _bare(text))


def check_text(text: Any, where: str, *, what: str = "a name", max_len: int = NAME_MAX,
               multiline: bool = False) -> str:
    """Text a person typed, checked so that every page can show it: a string of at most ``max_len``
    characters, no lone surrogates (they cannot be encoded), no control characters (tabs and
    newlines allowed with ``multiline``), no bidirectional overrides (they reorder what is shown),
    and on one line (not ``multiline``) something visible (:func:`is_blank`). Returns the text in
    Unicode's composed form (NFC), so that an accented letter typed as one character or as a
    letter plus a combining accent is the same text."""
    if not isinstance(text, str):
        raise LabError(f"{what} must be text (got {type(text).__name__})", where=where)
    if len(text) > max_len:
        raise LabError(f"{what} may have at most {max_len} characters (got {len(text):,})", where=where)
    for ch in text:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            raise LabError(f"{what} holds a character that is not text (U+{o:04X})", where=where)
        if o in _BIDI:
            raise LabError(f"{what} holds a direction override (U+{o:04X}), which reorders what is shown",
                           where=where)
        if unicodedata.category(ch) == "Cc" and not (multiline and ch in "\n\t\r"):
            raise LabError(f"{what} holds a control character (U+{o:04X})", where=where)
        if not multiline and unicodedata.category(ch) in ("Zl", "Zp"):
            raise LabError(f"{what} holds a line break (U+{o:04X}); it must fit on one line", where=where)
    if not multiline and is_blank(text):
        raise LabError(f"{what} must have a visible character (a letter, digit, punctuation or symbol)",
                       where=where)
    return nfc(text)


def check_name(name: Any, where: str, *, what: str = "a name", max_len: int = NAME_MAX) -> str:
    """A name: non-empty text on one line that :func:`check_text` accepts, in composed form (NFC)."""
    if not isinstance(name, str) or not name:
        raise LabError(f"{what} must be a non-empty string (got {shown(name, 40)})", where=where)
    return check_text(name, where, what=what, max_len=max_len)


@lru_cache(maxsize=1)
def _look_alikes() -> dict[str, str]:
    """character -> the one character that stands for all that look like it (Unicode's confusables,
    single characters only). A group's stand-in is an ASCII small letter if it has one, else an ASCII
    capital, a digit, other ASCII, else its lowest code point (so I, l, | and 1 are all l)."""
    from confusable_homoglyphs.confusables import confusables_data  # ~1 MB of data: read on first use

    parent: dict[str, str] = {}

    def root(c: str) -> str:
        while parent.get(c, c) != c:
            parent[c] = parent.get(parent[c], parent[c])
            c = parent[c]
        return c

    marks = "\u200e\u200f"  # the data wraps right-to-left letters in direction marks
    for key, glyphs in confusables_data.items():
        a = key.strip(marks)
        if len(a) != 1:
            continue
        for g in glyphs:
            b = g["c"].strip(marks)
            if len(b) == 1:
                ra, rb = root(a), root(b)
                if ra != rb:
                    parent[rb] = ra
    groups: dict[str, list[str]] = {}
    for c in {*parent, *parent.values()}:
        groups.setdefault(root(c), []).append(c)

    def rank(c: str) -> tuple:
        return (not ("a" <= c <= "z"), not ("A" <= c <= "Z"), not c.isascii() or not c.isdigit(),
                not c.isascii(), ord(c))

    table: dict[str, str] = {}
    for members in groups.values():
        stand_in = min(members, key=rank)
        for c in members:
            if c != stand_in:
                table[c] = stand_in
    return table


@lru_cache(maxsize=1)
def _sequences() -> tuple[tuple[str, str], ...]:
    """Runs of small ASCII letters that read as one letter ("rn" as m), longest first: those in the
    package's data, and two that Unicode's confusables.txt (UTS #39) lists and the package leaves out."""
    from confusable_homoglyphs.confusables import confusables_data

    out = {"cl": "d", "vv": "w"}
    for key, glyphs in confusables_data.items():
        for g in glyphs:
            for one, run in ((key, g["c"]), (g["c"], key)):
                if len(one) == 1 and one.isascii() and one.isalpha() and 2 <= len(run) <= 3 \
                        and run.isascii() and run.isalpha():
                    out[run.casefold()] = one.casefold()
    folded = {"".join(_look_alike_char(c) for c in run): _look_alike_char(one) for run, one in out.items()}
    return tuple(sorted(folded.items(), key=lambda kv: -len(kv[0])))


@lru_cache(maxsize=4096)
def _look_alike_char(ch: str) -> str:
    return _look_alikes().get(ch, ch)


def fold(name: str) -> str:
    """The key of a name with case set aside: two names with equal keys are the same to a reader but for case,
    compatibility forms, spaces, invisible characters and combining marks (NFKC case folding of
    :func:`_bare`; case folding can bring a mark back, as İ folds to i and a dot above, so it is bared again)."""
    return _bare(_bare(name).casefold())


def _skeleton_of(bare: str) -> str:
    key = unicodedata.normalize("NFKC", "".join(_look_alike_char(ch) for ch in bare))
    for run, one in _sequences():
        key = key.replace(run, one)
    return key


def skeleton(name: str) -> str:
    """The key of a name letter for letter, as shown (UTS #39's skeleton, with spaces, invisible characters and
    combining marks set aside): look-alike letters of other scripts (Cyrillic р for p, Greek ο for o), capital I,
    small l and 1, O and 0, and runs of letters that read as one letter (rn as m, cl as d, vv as w) meet; a
    Cyrillic capital В is B, its small в is not b, and L is not I."""
    return _skeleton_of(_bare(name))


def _keys(name: str) -> tuple[str, str, str]:
    """The three keys two look-alike names share one of: the folded name, the skeleton, and the folded name with
    its letters of other scripts as the Latin letters they look like (Cyrillic А in "АLICE" folds to а, which
    looks like the a of "alice"). Case folding is never followed by the ASCII look-alikes: I's skeleton is l,
    which L folds to, yet nobody reads L as I, nor L as 1."""
    folded = fold(name)
    latin = unicodedata.normalize("NFKC", "".join(ch if ch.isascii() else _look_alike_char(ch) for ch in folded))
    return folded, skeleton(name), latin


def look_alike(a: str, b: str) -> bool:
    """Whether a reader could take one name for the other: equal but for case, spaces, invisible characters and
    combining marks, or letter for letter (:func:`skeleton`), or both."""
    return any(x == y for x, y in zip(_keys(a), _keys(b)))


def check_distinct(names: Iterable[str], where: str, *, namespace: str = "the topology", what: str = "name") -> None:
    """Refuse a name that only looks like an earlier, different one of ``names`` (:func:`look_alike`).
    The same name twice is left to the caller (some namespaces, pools, repeat names on purpose)."""
    seen: dict[tuple[int, str], str] = {}
    for n in names:
        for kind, key in enumerate(_keys(n)):
            other = seen.setdefault((kind, key), n)
            if other != n:
                raise LabError(f"the {what} {shown(n, 60)} looks like {shown(other, 60)}, already in {namespace}; "
                               "names must differ by more than case, spacing, invisible characters, marks or "
                               "look-alike letters", where=where)


#: What a report writes in place of a :class:`Withheld` value.
WITHHELD = "withheld from the report"


class Withheld(str):
    """Text a page shows its reader and a report leaves out. A report is made to be handed on, and some of what
    a page shows is for the people in the room only (the Class page's join code lets anyone who reads it take a
    seat). It is still a ``str``: the page draws it as any text, and :mod:`lab.report.html` writes
    :data:`WITHHELD` in its place wherever it appears in a section."""

    __slots__ = ()


_WJ = "\u2060"  # word joiner: invisible, and it breaks the patterns Markdown turns into links by itself


def plain(text: str) -> str:
    """User text shown as text in anything rendered as Markdown (the pages, the HTML report) (st.markdown, st.caption,
    st.error/warning/info/success, st.toast, st.expander and st.tabs labels, widget labels, metric
    labels): escape Markdown and HTML special characters (``&`` too, so that ``&lt;`` stays five
    characters), and break the bare addresses (``http://``, ``www.``, ``name@host``) that
    Streamlit's Markdown would turn into live links even when every special character is escaped."""
    text = re.sub(r"(?i)(?<=[a-z]):(?=//)", ":" + _WJ, str(text))
    text = re.sub(r"(?i)\b(www)\.", r"\1" + _WJ + ".", text).replace("@", _WJ + "@")
    out = []
    for ch in text:
        if ch in "\\`*_{}[]()#+-.!|<>~$:&":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


__all__ = ["MAX_DEPTH", "NAME_MAX", "WITHHELD", "Withheld", "check_depth", "check_distinct", "check_name",
           "check_text", "fold", "is_blank", "look_alike", "loads", "nfc", "plain", "shown", "skeleton"]
