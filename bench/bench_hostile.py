"""What the lab does with hostile input: a bounded, seeded fuzz of everything a classroom can hand it
as data, through the entry points the app and the command line use.

    .venv/bin/python bench/bench_hostile.py [--seconds 60] [--seed 0] [--per-family 150] [--smoke]

Entry points: scenario files (``Scenario.from_json``, text or bytes; bases: the default scenario and
``assets/*.json``), topology files (``Topology.from_json``), the scenario link ``?s=``
(``Scenario.from_url_param``), the view link ``?v=`` (``lab.view.state.decode``, which must never
raise), and names (``check_name``, ``check_distinct``, and names placed in the documents: scenario,
topology, device, pool, switch, pinned operator and pinned device); who a person is: a cookie's value
(``access.owner_id``: forged, flipped, swapped or foreign tokens must all be refused), a lesson link's ``l=`` and
``lt=`` (Unicode digits, huge lists, paths; a tick outside the lesson is a crash), and near guesses of the
teacher's token from one client address (``Roster.sign_in``: a guess that signs in is a breach; the line after the
table says how long the server makes the guesser wait); what one student does to the class: uploads
(``onnx_models.keep``: a compute, memory or shape-inference bomb, a tensor naming a file on the server, a class
count of 0, -3 or a name must be refused; a harmless network is accepted), addresses written by a browser
(``access.client_address``: a header a browser wrote that the server counts it by is a breach), a removed
student joining again (``join_class`` under any name, code case or spacing: a seat is a breach) and report links
(``report.link.check_link``: a link other than http or https that is accepted is a breach).

Every family makes ``--per-family`` inputs from one seeded ``random.Random``; the families take
turns, one input each, until they are done or the ``--seconds`` budget (counted from start-up) is
spent, so a short budget still touches every family. One input may take at most 10 s (a timer
interrupts it; it then counts as slow). Outcomes:

* ``accepted``: a value came back (for ``decode``: at least one control's value, or nothing and no
  notice);
* ``refused``: a ``LabError`` of at most 500 characters with no traceback text (for ``decode``:
  no values and notices, each at most 500 characters);
* ``refused-long``: a ``LabError`` (or a notice) longer than 500 characters, or quoting a traceback;
* ``crash``: any other exception (for ``decode``, any exception at all), counted by type;
* ``slow``: the call took more than 1 s (on top of its outcome);
* ``breach`` (name families only): a name that must be refused was accepted. Markdown and HTML are
  allowed in names (pages show names as text); control characters, bidirectional controls, lone
  surrogates, blank-looking names and look-alikes of a name already in the same namespace are not.

Before the fuzz, every (base, place) a name family uses is checked with a harmless name: a place
that refuses a harmless name is left out, so a refusal there says something about the name.
The last line is fixed:
``hostile: inputs <n>, refused <n>, crashes <n>, breaches <n>, slowest <s> s``
(``refused`` counts both refusal columns).

``--smoke``: two inputs per family within a 30 s budget; it checks the bench still runs and measures nothing.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # the budget covers the imports too

import base64  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import string  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
import zlib  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any, Callable  # noqa: E402

from common import bench_parser, ROOT, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.errors import LabError  # noqa: E402
from lab.scenario.document import Scenario, default_scenario  # noqa: E402
from lab.scenario.text import check_distinct, check_name, fold  # noqa: E402
from lab.scenario.topology import Topology  # noqa: E402
from lab.view import state as viewstate  # noqa: E402
from lab.jobs import access  # noqa: E402
from lab.view.lessons import find_lesson, ticks_from_param  # noqa: E402

LESSONS = ROOT / "assets" / "lessons"
GUESSER = "guesser-0001"  # one student guessing the teacher's token ...
GUESSER_AT = "10.0.0.66"  # ... from one address
_now = [0.0]


def _guess_clock() -> float:  # each guess comes 0.2 s after the last: the delays counted are the server's
    _now[0] += 0.2
    return _now[0]


ROSTER = access.Roster(clock=_guess_clock)

MAX_MESSAGE = 500
SLOW_S = 1.0
CAP_S = 10.0  # one input's time limit
HEAVY = 0.03  # share of inputs in a few families that are the costliest of their kind (seconds each)
SENT = "@@HOSTILE@@"
LAB_DIR = str(ROOT / "lab")
TB_RE = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------
def e_scenario(text):
    return Scenario.from_json(text)


def e_topology(text):
    return Topology.from_json(text)


def e_url(param):
    return Scenario.from_url_param(param)


def e_view(param):
    return viewstate.decode(param)


def e_name(name):
    return check_name(name, "bench")


def e_distinct(names):
    return check_distinct(names, "bench")


def e_token(token):
    """A cookie's value as the server reads it: the owner id of a token it issued, else a LabError."""
    return access.owner_id(token)


def e_lesson_link(arg):
    """A link's lesson (``l=``) and ticked steps (``lt=``) as a page reads them: a notice is a refusal; a tick
    outside the lesson's steps is a crash (it would be stored)."""
    lesson_id, ticks = arg
    lesson = find_lesson(LESSONS, lesson_id)
    steps = len(lesson.steps) if lesson is not None else 5
    got, notice = ticks_from_param(ticks, steps)
    if any(not (isinstance(t, int) and 0 <= t < steps) for t in got):
        raise AssertionError(f"ticks outside the lesson: {sorted(got)[:5]}")
    if notice is not None:
        raise LabError(notice)
    return got


def e_sign_in(guess):
    """A guess at the teacher's token from one client: a wrong one, or one made while the server makes the
    client wait, is a refusal; a guess that signs in is a breach."""
    if not ROSTER.sign_in(GUESSER, guess, GUESSER_AT):
        raise LabError("not the teacher token")
    return True


def e_upload(data: bytes):
    """An uploaded ONNX file as the Placement page keeps it (into the bench's own data folder)."""
    from lab.scenario import onnx_models

    return onnx_models.keep(data, "upload.onnx")


def e_address(arg):
    """A browser's request as the server counts it: accepted (a breach where it must be refused) when the address
    it is counted by is one the browser wrote itself; refused when it is the connection's, the proxy's or the one
    address every browser of a proxy shares."""
    peer, headers, behind_proxy, forged = arg
    got = access.client_address(peer, headers, behind_proxy)
    if got == forged:
        return got
    raise LabError(f"counted as {got}")


_CLASS: dict[str, Any] = {}


def _class_store():
    """A class of the bench's own (a run store in its data folder) with one student removed."""
    if not _CLASS:
        from lab.store.runs import RunStore

        store = RunStore(os.path.join(os.environ["LAB_DATA"], "class.db"))
        code = store.class_book.open_class().code
        store.class_book.join_class("removed-student", code, "Mallory")
        store.class_book.remove_seat("removed-student")
        _CLASS.update(store=store, code=code)
    return _CLASS["store"], _CLASS["code"]


def e_rejoin(arg):
    """The removed student joins again with the code (as they type it) and a name: a seat is a breach."""
    code_of, name = arg
    store, code = _class_store()
    return store.class_book.join_class("removed-student", code_of(code), name)


def e_report_link(link):
    """A link a report would write as "Reopen this view" (and the report command line accepts)."""
    from lab.report.link import check_link

    return check_link(link)


ENTRY_LABEL = {e_scenario: "Scenario.from_json", e_topology: "Topology.from_json", e_url: "from_url_param",
               e_view: "view.decode", e_name: "check_name", e_distinct: "check_distinct"}


@dataclass
class Case:
    fn: Callable[[Any], Any]
    arg: Any
    desc: str
    must_refuse: bool = False  # for breach counting (name families)


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------
def load_bases() -> list[tuple[str, dict]]:
    bases = [("default", json.loads(default_scenario().to_json()))]
    for p in sorted((ROOT / "assets").glob("*.json")):
        try:
            text = p.read_text()
            Scenario.from_json(text)  # a base must itself be accepted
            bases.append((p.name, json.loads(text)))
        except Exception:  # noqa: BLE001 - an asset being edited right now is left out
            pass
    return bases


def all_paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(prefix + (k,))
            out += all_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append(prefix + (i,))
            out += all_paths(v, prefix + (i,))
    return out


def get_at(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def set_at(obj: Any, path: tuple, value: Any) -> None:
    get_at(obj, path[:-1])[path[-1]] = value


def path_str(path: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".") or "<root>"


def dumps(doc: Any, rng: random.Random) -> str:
    return json.dumps(doc, indent=rng.choice([None, 2]))


def inject(rng: random.Random, doc: dict, path: tuple, raw: str) -> str:
    """``doc`` as JSON text with the value at ``path`` replaced by the raw JSON text ``raw``."""
    d = copy.deepcopy(doc)
    if path:
        set_at(d, path, SENT)
        return dumps(d, rng).replace(json.dumps(SENT), raw, 1)
    return raw


def pick_path(rng: random.Random, doc: dict, want: Callable[[Any], bool] | None = None) -> tuple:
    paths = all_paths(doc)
    if want is not None:
        paths = [p for p in paths if want(get_at(doc, p))] or paths
    return rng.choice(paths)


def topo_of(doc: dict) -> dict:
    return doc["topology"] if "topology" in doc else doc


def rename(doc: dict, old: str, new: str) -> None:
    """Rename device or switch ``old`` everywhere it is named in a scenario document."""
    t = topo_of(doc)
    for node in (*t["devices"], *t.get("switches", [])):
        if node["name"] == old:
            node["name"] = new
    for link in t["links"]:
        for end in ("a", "b"):
            if link[end] == old:
                link[end] = new
    tr = doc.get("training") or {}
    if "worker_devices" in tr:
        tr["worker_devices"] = [new if n == old else n for n in tr["worker_devices"]]
    if isinstance(tr.get("pins"), dict):
        tr["pins"] = {k: (new if v == old else v) for k, v in tr["pins"].items()}


def add_node(doc: dict, name: str, beside: str, switch: bool = False) -> None:
    t = topo_of(doc)
    if switch:
        t.setdefault("switches", []).append({"name": name})
    else:
        dev = copy.deepcopy(next(d for d in t["devices"] if d["name"] == beside))
        dev["name"] = name
        t["devices"].append(dev)
    t["links"].append({"a": beside, "b": name, "kind": "pcie", "bandwidth": 1e9, "latency": 1e-6})


# ---------------------------------------------------------------------------------------------
# Hostile values (as raw JSON text, with a short description)
# ---------------------------------------------------------------------------------------------
def deep_raw(rng: random.Random, lo: int = 30, hi: int = 2000) -> tuple[str, str]:
    d = rng.randint(lo, hi)
    kind = rng.choice(["list", "dict", "mixed"])
    if kind == "list":
        return "[" * d + rng.choice(["0", '"x"', "null", "[]"]) + "]" * d, f"list nested {d} deep"
    if kind == "dict":
        return '{"name":' * d + "0" + "}" * d, f"object nested {d} deep"
    opens, closes = [], []
    for _ in range(d):
        if rng.random() < 0.5:
            opens.append("[")
            closes.append("]")
        else:
            opens.append('{"a":')
            closes.append("}")
    return "".join(opens) + "1" + "".join(reversed(closes)), f"lists and objects nested {d} deep"


ALPHABETS = [string.ascii_letters, "\u00e9\u4e2d\u0440\u202e\u200b\u3164\ud800 \\\"\n\t\x00",
             "".join(chr(c) for c in range(0x20, 0x7f)), "a"]


def big_text(rng: random.Random, n: int) -> str:
    chunk = "".join(rng.choice(rng.choice(ALPHABETS)) for _ in range(min(n, 997)))
    return (chunk * (n // max(1, len(chunk)) + 1))[:n]


def huge_string_raw(rng: random.Random, sizes=(1_000, 100_000, 1 << 20, 3 << 20, 4_900_000, 6 << 20)) -> tuple[str, str]:
    n = rng.choice(sizes)
    return json.dumps(big_text(rng, n)), f"a string of {n:,} characters"


FILL = (5 << 20) - (16 << 10)  # as much as a file may hold, less room for the document around it


def huge_list_raw(rng: random.Random, sizes=(1_000, 10_000, 100_000, 500_000), fill: bool = False) -> tuple[str, str]:
    n = rng.choice(sizes)
    item = rng.choice(["0", '"gpu"', "{}", "[]", "null", '["a","b"]', '{"name":"x"}', "1e308"])
    if fill:  # the most containers a file under the size cap holds (rare: each costs seconds)
        item = rng.choice(["{}", "[]"])
        n = FILL // (len(item) + 1)
    return "[" + ",".join([item] * n) + "]", f"a list of {n:,} x {item}"


def huge_dict_raw(rng: random.Random) -> tuple[str, str]:
    n = rng.choice([1_000, 50_000, 200_000])
    return "{" + ",".join(f'"k{i}":{i}' for i in range(n)) + "}", f"an object of {n:,} keys"


ODD_NUMBERS = ["1" + "0" * 5000, "-1" + "0" * 5000, "1" + "0" * 4000, "1" + "0" * 400, "1e400", "-1e400", "NaN",
               "Infinity", "-Infinity", "-0.0", "-0", "0", "5e-324", "1e-400", "2.5", "1e18", "1000000000000000001",
               "9223372036854775808", "1.7976931348623157e308", "-1", "true", "false", "null", '"12"', '"1e3"',
               '"NaN"', "[1]", "{}", "0.1e-99999", "1E+2", "123456789012345678901234567890.5"]
WRONG_TYPES = ["0", "1.5", "-3", "true", "false", "null", "[]", "{}", '""', '"x"', '[["a","b"]]', '{"a":1}',
               '"\\u0000"', '[null]', '[1,2,3]', '{"":""}', '" "']


def odd_number_raw(rng: random.Random) -> tuple[str, str]:
    raw = rng.choice(ODD_NUMBERS)
    return raw, ("10**5000" if raw == ODD_NUMBERS[0] else "-10**5000" if raw == ODD_NUMBERS[1]
                 else "10**4000" if raw == ODD_NUMBERS[2] else raw[:30])


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------
MARKUP = ["![x](http://127.0.0.2/a.png)", "<img src=http://127.0.0.2/a.png onerror=alert(1)>",
          "[a](http://127.0.0.2/)", "**bold** _it_", "<script>alert(1)</script>", "`code`", ":red[x] :material/home:",
          "$$\\frac{1}{0}$$", "# heading", "<a href='javascript:alert(1)'>x</a>", "{{7*7}}", "'; DROP TABLE runs;--",
          "<b>gpu</b>", "[![a](http://127.0.0.2/b.png)](http://127.0.0.2/)", "<iframe src=//127.0.0.2>",
          "gpu | x |\n|---|", "&lt;b&gt;", "%s%n%x", "../../etc/passwd", "~~gpu~~"]
CONTROLS = [chr(c) for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]] + ["\u2028", "\u2029"]
BIDI_OVERRIDES = [chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]
BIDI_MARKS = ["\u200e", "\u200f", "\u061c"]  # Bidi_Control too: a mark reorders neutrals and digits beside it
SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]
BLANKS = ["\u3164", "\u2800", "\u0301", "\u3164\u3164", " ", "\u00a0", "\u200b", "\ufeff", "\u115f", "\u1160",
          "\uffa0", "\u2800 \u2800", "\u034f", "\u180e", "\u2060", "\u3000", "\u2003", "\ufe0f", "\U000e0020",
          "\u17b4", "\u17b5", "\u2062", "\U0001d173", "\U0001bca0", "\u0301\u0301", "\u3164\u0301", "\u2007",
          "\u202f", "\u205f", "\u00ad", "\U0001d159", "\u200c\u200d", "\u2800\u3164\u200b", "\U000e0001",
          "\u200a", "\ue000", "\U0010ffff", "\u0378", "\U000e01ef", "\u2063"]
# Single-letter look-alikes (UTS #39 confusables): Cyrillic, Greek, Armenian, Latin letters and forms.
HOMOGLYPHS = {"a": "\u0430", "c": "\u0441", "e": "\u0435", "o": "\u043e", "p": "\u0440", "x": "\u0445",
              "y": "\u0443", "i": "\u0456", "s": "\u0455", "j": "\u0458", "h": "\u04bb", "d": "\u0501",
              "g": "\u0261", "u": "\u057d", "v": "\u03bd", "l": "\u217c", "n": "\u0578", "0": "\u041e",
              "1": "l", "k": "\u03ba", "t": "\U0001d5cd", "r": "\u0433", "m": "\u217f",
              "w": "\u051d", "q": "\u051b", "b": "\u13cf", "f": "\U0001d41f"}
MULTI_LETTER = {"m": "rn", "w": "vv", "d": "cl"}  # UTS #39 lists these; fold maps single letters only


def fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else ("\u3000" if c == " " else c) for c in s)


def insert(rng: random.Random, s: str, piece: str) -> str:
    i = rng.randint(0, len(s))
    return s[:i] + piece + s[i:]


def look_alike(rng: random.Random, name: str) -> tuple[str, str]:
    """A different string that reads like ``name``, and how it was made."""
    kinds = ["trailing space", "leading space", "zero-width", "homoglyph", "no-break space", "full-width",
             "case", "soft hyphen", "word joiner", "hangul filler", "variation selector", "double space",
             "ideographic space", "braille blank"]
    while True:
        k = rng.choice(kinds)
        if k == "trailing space":
            out = name + " "
        elif k == "leading space":
            out = " " + name
        elif k == "zero-width":
            out = insert(rng, name, rng.choice(["\u200b", "\u200c", "\u200d", "\ufeff"]))
        elif k == "homoglyph":
            idx = [i for i, c in enumerate(name) if c.lower() in HOMOGLYPHS]
            if not idx:
                continue
            i = rng.choice(idx)
            out = name[:i] + HOMOGLYPHS[name[i].lower()] + name[i + 1:]
        elif k == "no-break space":
            out = name.replace(" ", "\u00a0") if " " in name else name + "\u00a0"
        elif k == "full-width":
            out = fullwidth(name)
        elif k == "case":
            out = name.upper() if name != name.upper() else name.lower()
            if out == name:
                continue
        elif k == "soft hyphen":
            out = insert(rng, name, "\u00ad")
        elif k == "word joiner":
            out = insert(rng, name, "\u2060")
        elif k == "hangul filler":
            out = insert(rng, name, "\u3164")
        elif k == "variation selector":
            out = insert(rng, name, "\ufe0f")
        elif k == "double space":
            out = name.replace(" ", "  ", 1) if " " in name else name + "  "
        elif k == "ideographic space":
            out = name + "\u3000"
        else:
            out = name + "\u2800"
        if out != name:
            return out, k


def multi_letter_alike(rng: random.Random, name: str) -> tuple[str, str] | None:
    idx = [i for i, c in enumerate(name) if c in MULTI_LETTER]
    if not idx:
        return None
    i = rng.choice(idx)
    return name[:i] + MULTI_LETTER[name[i]] + name[i + 1:], f"{name[i]!r} -> {MULTI_LETTER[name[i]]!r}"


def hostile_name(rng: random.Random, kind: str, base: str) -> tuple[str, str]:
    """A name of ``kind`` made from ``base``, and how."""
    if kind == "markup":
        return rng.choice(MARKUP)[:64], "markup"
    if kind == "control":
        c = rng.choice(CONTROLS)
        return (insert(rng, base, c) if rng.random() < 0.8 else c), f"U+{ord(c):04X}"
    if kind == "bidi":
        c = rng.choice(BIDI_OVERRIDES)
        return (insert(rng, base, c) if rng.random() < 0.7 else c + base[::-1]), f"U+{ord(c):04X}"
    if kind == "bidi-mark":
        c = rng.choice(BIDI_MARKS)
        return rng.choice([insert(rng, base, c), "1" + c + ".2", base + c + "-1"]), f"U+{ord(c):04X}"
    if kind == "surrogate":
        c = rng.choice(SURROGATES)
        return (insert(rng, base, c) if rng.random() < 0.8 else c), f"U+{ord(c):04X}"
    if kind == "blank":
        b = rng.choice(BLANKS)
        return b, "blank " + " ".join(f"U+{ord(c):04X}" for c in b)
    raise AssertionError(kind)


# Places a name can go, and how a name reaches them.
NAME_SLOTS = ["check_name", "scenario.name", "topology.name", "device.name", "topology-file device.name",
              "device.pool", "switch.name", "pin.operator", "pin.device"]
ALIKE_SLOTS = ["device beside device", "switch beside device", "pool beside pool", "pin operator beside operator",
               "pin to a look-alike device", "worker on a look-alike device", "check_distinct"]
OPS = ["fc1", "conv1", "matmul_0", "norm", "attn.qkv", "dwconv", "mlp.w1", "embed"]


def fresh(rng: random.Random, bases: list) -> tuple[str, dict, dict, str, dict]:
    """A copy of one base document: (its label, the document, its topology, one of its devices, its training)."""
    label, base = rng.choice(bases)
    doc = copy.deepcopy(base)
    t = topo_of(doc)
    return label, doc, t, rng.choice([d["name"] for d in t["devices"]]), doc.setdefault("training", {})


def place_name(rng: random.Random, bases: list, slot: str, name: str) -> tuple[Callable, Any]:
    label, doc, t, dev, tr = fresh(rng, bases)
    if slot == "check_name":
        return e_name, name
    if slot == "scenario.name":
        doc["name"] = name
    elif slot == "topology.name":
        t["name"] = name
    elif slot in ("device.name", "topology-file device.name"):
        rename(doc, dev, name)
        if slot.startswith("topology-file"):
            return e_topology, dumps(t, rng)
    elif slot == "device.pool":
        rng.choice(t["devices"])["pool"] = name
    elif slot == "switch.name":
        if t.get("switches"):
            rename(doc, rng.choice(t["switches"])["name"], name)
        else:
            add_node(doc, name, dev, switch=True)
    elif slot == "pin.operator":
        tr["pins"] = {name: dev}
    elif slot == "pin.device":
        rename(doc, dev, name)
        tr["pins"] = {rng.choice(OPS): name}
    else:
        raise AssertionError(slot)
    text = dumps(doc, rng)
    return e_scenario, (text.encode() if rng.random() < 0.3 else text)


def place_alike(rng: random.Random, bases: list, slot: str, make: Callable[[str], tuple[str, str] | None]
                ) -> tuple[Callable, Any, str] | None:
    """A document (or call) holding a name and a look-alike of it in one namespace."""
    label, doc, t, dev, tr = fresh(rng, bases)
    if slot == "pool beside pool":
        i, j = rng.sample(range(len(t["devices"])), 2)
        orig = t["devices"][i].get("pool", "pool0")
        made = make(orig)
        if made is None:
            return None
        t["devices"][j]["pool"] = made[0]
        return e_scenario, dumps(doc, rng), f"{label}: pools {orig!r} and {ascii(made[0])} ({made[1]})"
    if slot == "pin operator beside operator":
        op = rng.choice(OPS)
        made = make(op)
        if made is None:
            return None
        tr["pins"] = {op: dev, made[0]: dev}
        return e_scenario, dumps(doc, rng), f"{label}: pins {op!r} and {ascii(made[0])} ({made[1]})"
    if slot == "check_distinct":
        made = make(dev)
        if made is None:
            return None
        return e_distinct, [dev, made[0]], f"check_distinct([{dev!r}, {ascii(made[0])}]) ({made[1]})"
    made = make(dev)
    if made is None:
        return None
    alike, how = made
    if slot == "device beside device":
        add_node(doc, alike, dev)
    elif slot == "switch beside device":
        add_node(doc, alike, dev, switch=True)
    elif slot == "pin to a look-alike device":
        tr["pins"] = {rng.choice(OPS): alike}
    elif slot == "worker on a look-alike device":
        tr["worker_devices"] = [alike]
    else:
        raise AssertionError(slot)
    where = "topology file" if rng.random() < 0.25 and slot.endswith("beside device") else label
    desc = f"{where}: {slot}: {dev!r} and {ascii(alike)} ({how})"
    if where == "topology file":
        return e_topology, dumps(t, rng), desc
    return e_scenario, dumps(doc, rng), desc


def usable_slots(bases: list) -> dict[str, list]:
    """For each name slot, the bases where a harmless name is accepted there."""
    rng = random.Random(1)
    out: dict[str, list] = {}
    for slot in NAME_SLOTS:
        ok = []
        for b in bases:
            fn, arg = place_name(rng, [b], slot, "bench-ok-name")
            try:
                fn(arg)
                ok.append(b)
            except Exception:  # noqa: BLE001
                pass
        out[slot] = ok
    for slot in ALIKE_SLOTS:
        ok = []
        for b in bases:
            made = place_alike(rng, [b], slot, lambda n: (n + "-2x", "harmless"))
            if made is None:
                continue
            try:
                made[0](made[1])
                if slot in ("pin to a look-alike device", "worker on a look-alike device"):
                    continue  # a harmless other name is not a device either: refused by design
                ok.append(b)
            except Exception:  # noqa: BLE001
                if slot in ("pin to a look-alike device", "worker on a look-alike device"):
                    ok.append(b)
        out[slot] = ok
    return out


# ---------------------------------------------------------------------------------------------
# Links
# ---------------------------------------------------------------------------------------------
def b64z(raw: bytes, level: int = 9) -> str:
    return base64.urlsafe_b64encode(zlib.compress(raw, level)).decode().rstrip("=")


def bomb(size: int, fill: bytes = b"\0", head: bytes = b"", tail: bytes = b"") -> str:
    """A link of ``head`` + ``size`` bytes of ``fill`` + ``tail``, deflated (streamed: cheap to make)."""
    size -= size % len(fill)  # whole copies of ``fill``: a bomb of JSON stays JSON
    c = zlib.compressobj(9)
    parts = [c.compress(head)]
    chunk = fill * ((1 << 20) // len(fill))
    left = size
    while left > 0:
        parts.append(c.compress(chunk[:left]))
        left -= len(chunk)
    parts.append(c.compress(tail))
    parts.append(c.flush())
    return base64.urlsafe_b64encode(b"".join(parts)).decode().rstrip("=")


class Bombs:
    """Link bombs, made once each and reused."""

    def __init__(self, good_doc: str):
        self.good = good_doc.encode()
        self._cache: dict[str, str] = {}

    def get(self, name: str) -> str:
        if name not in self._cache:
            mb = 1 << 20
            self._cache[name] = {
                "s zeros 70 MB": lambda: bomb(70 * mb),
                "s spaces 70 MB": lambda: bomb(70 * mb, b" "),
                "s '[' x 70 MB": lambda: bomb(70 * mb, b"["),
                "s string of 70 MB": lambda: bomb(70 * mb, b"a", head=b'{"name":"'),
                "s valid doc + 70 MB spaces + garbage": lambda: bomb(70 * mb, b" ", head=self.good, tail=b"garbage"),
                "s zeros 120 MB (over the link length)": lambda: bomb(120 * mb),
                "s 5 MB of [{},{},..] (heavy)": lambda: bomb(FILL, b"{},", head=b"[", tail=b"{}]"),
                "s 5 MB of [[],[],..] (heavy)": lambda: bomb(FILL, b"[],", head=b"[", tail=b"[]]"),
                "v 1 MB of {} in a list (heavy)": lambda: bomb((1 << 20) - 4096, b"{},", head=b'{"x":[', tail=b"{}]}"),
                "s gzip magic + zlib stream": lambda: base64.urlsafe_b64encode(
                    b"\x1f\x8b" + zlib.compress(bytes(8 << 10))).decode(),
                "v zeros 15 MB": lambda: bomb(15 * mb),
                "v spaces 15 MB": lambda: bomb(15 * mb, b" "),
                "v '[' x 15 MB": lambda: bomb(15 * mb, b"["),
                "v keys 15 MB": lambda: bomb(15 * mb, b'"pl_slow_x":1.0,', head=b"{"),
                "v prefix keys 15 MB": lambda: bomb(15 * mb, b'"pl_slow_' + b"z" * 180 + b'":2.0,', head=b"{"),
                "v unknown keys 15 MB": lambda: bomb(15 * mb, b'"\xe2\x80\xae' + b"k" * 60 + b'":1,', head=b"{"),
            }[name]()
        return self._cache[name]

    def names(self, prefix: str, heavy: bool = False) -> list[str]:
        if heavy:
            return [n for n in ("s 5 MB of [{},{},..] (heavy)", "s 5 MB of [[],[],..] (heavy)",
                                "v 1 MB of {} in a list (heavy)") if n.startswith(prefix)]
        return [n for n in ("s zeros 70 MB", "s spaces 70 MB", "s '[' x 70 MB", "s string of 70 MB",
                            "s valid doc + 70 MB spaces + garbage", "s zeros 120 MB (over the link length)",
                            "s gzip magic + zlib stream", "v zeros 15 MB", "v spaces 15 MB",
                            "v '[' x 15 MB", "v keys 15 MB", "v prefix keys 15 MB", "v unknown keys 15 MB")
                if n.startswith(prefix)]


B64 = string.ascii_letters + string.digits + "-_"


def random_b64(rng: random.Random, limit: int) -> tuple[str, str]:
    k = rng.randrange(6)
    n = rng.choice([0, 1, 2, 3, 5, 100, 4096, limit - 1, limit, limit + 1, rng.randrange(limit * 2)])
    if k == 0:
        return "".join(rng.choice(B64) for _ in range(min(n, 20000))) * max(1, n // 20000), f"{n} base64 letters"
    if k == 1:
        s = "".join(rng.choice(B64 + "+/=. %\n\u00e9\u202e\ud800") for _ in range(min(n, 5000)))
        return s, f"{len(s)} letters, some not base64"
    if k == 2:
        raw = rng.randbytes(min(n, 70000))
        return b64z(raw, 1), f"deflated {len(raw)} random bytes"
    if k == 3:
        text = big_text(rng, min(n, 70000))
        return b64z(text.encode("utf-8", "surrogatepass"), 6), f"deflated {len(text)} random characters"
    if k == 4:
        raw = rng.randbytes(min(n, 70000))
        return base64.urlsafe_b64encode(raw).decode(), f"{len(raw)} random bytes, not deflated"
    s = b64z(b'{"a":1}')
    i = rng.randrange(len(s))
    return s[:i] + rng.choice(B64) + s[i + 1:], "a short link with one letter changed"


# ---------------------------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------------------------
@dataclass
class Fuzz:
    rng: random.Random
    bases: list
    slots: dict
    bombs: Bombs

    def base(self) -> tuple[str, dict]:
        return self.rng.choice(self.bases)

    # ----- scenario documents
    def scn_deep(self) -> Case:
        label, doc = self.base()
        p = pick_path(self.rng, doc)
        raw, how = deep_raw(self.rng)
        return Case(e_scenario, inject(self.rng, doc, p, raw), f"{label}: {path_str(p)} = {how}")

    def scn_strings(self) -> Case:
        label, doc = self.base()
        r = self.rng
        raw, how = huge_string_raw(r)
        if r.random() < 0.25:  # as a key
            p = pick_path(r, doc, lambda v: isinstance(v, dict))
            d = copy.deepcopy(doc)
            get_at(d, p)[SENT] = 0
            return Case(e_scenario, dumps(d, r).replace(json.dumps(SENT), raw, 1), f"{label}: key of {path_str(p)} = {how}")
        p = pick_path(r, doc, lambda v: isinstance(v, str))
        return Case(e_scenario, inject(r, doc, p, raw), f"{label}: {path_str(p)} = {how}")

    def scn_lists(self) -> Case:
        label, doc = self.base()
        r = self.rng
        if r.random() < 0.2:
            raw, how = huge_dict_raw(r)
        else:
            raw, how = huge_list_raw(r, fill=r.random() < HEAVY)
        fixed = [("topology", "devices"), ("topology", "links"), ("topology", "switches"),
                 ("training", "worker_devices"), ("training", "pins"), ("topology", "devices", 0, "throughput")]
        p = r.choice(fixed) if r.random() < 0.5 else pick_path(r, doc)
        if p[0] == "training" and "training" not in doc:
            p = ("topology", "links")
        return Case(e_scenario, inject(r, doc, p, raw), f"{label}: {path_str(p)} = {how}")

    def scn_numbers(self) -> Case:
        label, doc = self.base()
        r = self.rng
        p = pick_path(r, doc, lambda v: isinstance(v, (int, float)) or (r.random() < 0.15 and isinstance(v, str)))
        raw, how = odd_number_raw(r)
        return Case(e_scenario, inject(r, doc, p, raw), f"{label}: {path_str(p)} = {how}")

    def scn_types(self) -> Case:
        label, doc = self.base()
        r = self.rng
        if r.random() < 0.15:
            raw = r.choice(WRONG_TYPES + ['"hetlab-scenario/1"', "[" + json.dumps(doc) + "]"])
            return Case(e_scenario, raw, f"top level = {raw[:40]}")
        if r.random() < 0.1:
            d = copy.deepcopy(doc)
            d["format"] = r.choice(["hetlab-scenario/2", "", None, 1, ["hetlab-scenario/1"]])
            return Case(e_scenario, dumps(d, r), f"{label}: format = {d['format']!r}")
        p = pick_path(r, doc, lambda v: isinstance(v, str) or r.random() < 0.3)
        raw = r.choice(WRONG_TYPES)
        return Case(e_scenario, inject(r, doc, p, raw), f"{label}: {path_str(p)} = {raw}")

    def scn_dupkeys(self) -> Case:
        label, doc = self.base()
        r = self.rng
        p = r.choice([()] + [q for q in all_paths(doc) if isinstance(get_at(doc, q), dict) and get_at(doc, q)])
        d = copy.deepcopy(doc)
        obj = get_at(d, p) if p else d
        key = r.choice(list(obj))
        val = r.choice([json.dumps(obj[key]), '"other"', "1", "null"])
        obj[SENT] = 0
        text = dumps(d, r).replace(f"{json.dumps(SENT)}: 0", f"{json.dumps(key)}: {val}", 1)
        return Case(e_scenario, text, f"{label}: {path_str(p)} has key {key!r} twice", must_refuse=False)

    def scn_broken(self) -> Case:
        label, doc = self.base()
        r = self.rng
        text = dumps(doc, r)
        k = r.randrange(7)
        if k == 0:
            i = r.randrange(len(text))
            return Case(e_scenario, text[:i], f"{label}: cut at {i} of {len(text)}")
        if k == 1:
            b = bytearray(text.encode())
            for _ in range(r.randint(1, 8)):
                b[r.randrange(len(b))] = r.randrange(256)
            return Case(e_scenario, bytes(b), f"{label}: up to 8 random bytes changed")
        if k == 2:
            n = r.choice([0, 1, 10, 1000, 100_000, 5 << 20, (5 << 20) + 1])
            return Case(e_scenario, r.randbytes(n), f"{n:,} random bytes")
        if k == 3:
            raw = r.choice(["", " ", "\n", "{}", "{", "}", "[", "null", '{"topology":{}}', "\ufeff{}", "{} {}",
                            text + text, text + " x", "{" * 10, '{"a":1,}', "[1,]", "'a'", "{'name': 'x'}"])
            return Case(e_scenario, raw, f"{ascii(raw[:40])}")
        if k == 4:
            i = r.randrange(len(text))
            return Case(e_scenario, text[:i] + text[i + 1:], f"{label}: character {i} deleted")
        if k == 5:
            s = "".join(r.choice(string.printable) for _ in range(r.randint(1, 3000)))
            return Case(e_scenario, s, f"{len(s)} random printable characters")
        i = r.randrange(len(text))
        piece = r.choice(["\x00", "\\", '"', "\\u", "\\ud800", "/*x*/", "\u2028", ",", ":", "]"])
        return Case(e_scenario, text[:i] + piece + text[i:], f"{label}: {ascii(piece)} inserted at {i}")

    def scn_bytes(self) -> Case:
        label, doc = self.base()
        r = self.rng
        text = dumps(doc, r)
        k = r.randrange(8)
        bad = r.choice([b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80",
                        b"\xf4\x90\x80\x80", b"\x00"])
        if k in (0, 1, 2):
            d = copy.deepcopy(doc)
            p = pick_path(r, d, lambda v: isinstance(v, str))
            set_at(d, p, SENT)
            raw = dumps(d, r).encode().replace(SENT.encode(), b"gpu" + bad + b"x", 1)
            return Case(e_scenario, raw, f"{label}: {path_str(p)} holds bytes {bad!r}")
        if k == 3:
            enc = r.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-8-sig", "cp1252",
                            "shift_jis"])
            d = copy.deepcopy(doc)
            d["name"] = "caf\u00e9-\u00e9t\u00e9"
            return Case(e_scenario, json.dumps(d, ensure_ascii=False).encode(enc, "replace"), f"{label} in {enc}")
        if k == 4:
            return Case(e_scenario, text.encode() + bad, f"{label} + trailing {bad!r}")
        if k == 5:
            return Case(e_scenario, bad + text.encode(), f"{bad!r} + {label}")
        if k == 6:
            return Case(e_scenario, text.encode("utf-16-le")[1:], f"{label} in UTF-16 minus its first byte")
        b = bytearray(text.encode())
        for _ in range(r.randint(1, 20)):
            b[r.randrange(len(b))] = r.randrange(0x80, 0x100)
        return Case(e_scenario, bytes(b), f"{label}: up to 20 bytes set to >= 0x80")

    # ----- topologies
    def topo_caps(self) -> Case:
        r = self.rng
        k = r.randrange(5)
        dev = {"name": "", "type": "gpu", "pool": "pool0", "memory": 1e9, "throughput": {"matmul": 1e12}}
        if k == 4:  # a cap's worth of nothing in particular: refused before any item is read?
            n = r.choice([10_000, 200_000])
            raw = '{"name":"t","devices":[' + ",".join(["{}"] * n) + '],"links":[' + ",".join(["{}"] * n) + "]}"
            return Case(r.choice([e_topology, e_scenario]), raw, f"{n:,} empty devices and links")
        nd = r.choice([2, 64, 200, 256, 257, 300, 1000])
        ns = r.choice([0, 0, 64, 65, 100])
        nl_target = r.choice([nd + ns - 1, 1024, 1025, 2000])
        devices = [dict(dev, name=f"d{i}") for i in range(nd)]
        switches = [{"name": f"s{i}"} for i in range(ns)]
        nodes = [d["name"] for d in devices] + [s["name"] for s in switches]
        links, pairs = [], set()
        for i in range(1, len(nodes)):  # a spanning chain keeps it connected
            links.append((nodes[i - 1], nodes[i]))
            pairs.add(frozenset(links[-1]))
        tries = 0
        while len(links) < nl_target and tries < nl_target * 5:
            tries += 1
            a, b = r.sample(nodes, 2)
            if frozenset((a, b)) not in pairs:
                pairs.add(frozenset((a, b)))
                links.append((a, b))
        t = {"name": "big", "devices": devices, "switches": switches,
             "links": [{"a": a, "b": b, "kind": "pcie", "bandwidth": 1e9, "latency": 1e-6} for a, b in links]}
        over = nd > 256 or ns > 64 or len(links) > 1024
        desc = f"{nd} devices, {ns} switches, {len(links)} links ({'over' if over else 'within'} the caps)"
        if r.random() < 0.5:
            return Case(e_topology, json.dumps(t), desc)
        return Case(e_scenario, json.dumps({"format": "hetlab-scenario/1", "name": "big", "topology": t}),
                    "scenario: " + desc)

    def topo_mut(self) -> Case:
        r = self.rng
        label, doc = self.base()
        t = doc["topology"]
        k = r.randrange(6)
        p = pick_path(r, t)
        if k == 0:
            raw, how = deep_raw(r)
        elif k == 1:
            raw, how = huge_string_raw(r)
        elif k == 2:
            raw, how = huge_list_raw(r)
        elif k == 3:
            raw, how = odd_number_raw(r)
        elif k == 4:
            raw = r.choice(WRONG_TYPES)
            how = raw
        else:
            text = dumps(t, r)
            i = r.randrange(len(text))
            return Case(e_topology, text[:i], f"{label} topology: cut at {i}")
        return Case(e_topology, inject(r, t, p, raw), f"{label} topology: {path_str(p)} = {how}")

    # ----- links
    def url_random(self) -> Case:
        s, how = random_b64(self.rng, 100_000)
        return Case(e_url, s, how)

    def url_bombs(self) -> Case:
        r = self.rng
        name = r.choice(self.bombs.names("s ", heavy=r.random() < HEAVY))
        s = self.bombs.get(name)
        k = r.randrange(4)
        if k == 1:
            i = r.randrange(len(s))
            s, name = s[:i] + r.choice(B64) + s[i + 1:], name + ", one letter changed"
        elif k == 2:
            i = r.randrange(1, len(s))
            s, name = s[:i], name + f", cut at {i}"
        return Case(e_url, s, name)

    def url_mut(self) -> Case:
        r = self.rng
        inner = r.choice([self.scn_deep, self.scn_numbers, self.scn_types, self.scn_dupkeys, self.scn_broken,
                          self.name_control, self.name_lookalike, self.scn_lists])()
        if inner.fn is not e_scenario:
            label, doc = self.base()
            inner = Case(e_scenario, dumps(doc, r), "a base document (fallback)")
        raw = inner.arg if isinstance(inner.arg, bytes) else inner.arg.encode("utf-8", "surrogatepass")
        return Case(e_url, b64z(raw, 6), "link of " + inner.desc)

    # ----- view
    def view_random(self) -> Case:
        r = self.rng
        if r.random() < 0.5:
            name = r.choice(self.bombs.names("v ", heavy=r.random() < 2 * HEAVY))
            s = self.bombs.get(name)
            if r.random() < 0.3:
                i = r.randrange(len(s))
                s, name = s[:i] + r.choice(B64) + s[i + 1:], name + ", one letter changed"
            return Case(e_view, s, name)
        s, how = random_b64(r, 20_000)
        return Case(e_view, s, how)

    def view_values(self) -> Case:
        r = self.rng
        keys = list(viewstate.VIEW)
        k = r.randrange(8)
        if k == 0:
            raw = r.choice(WRONG_TYPES + ["NaN", "Infinity", "1" + "0" * 5000])
            return Case(e_view, b64z(raw.encode()), f"top level {raw[:20]}")
        if k == 1:  # many prefix keys
            n = r.choice([100, 10_000, 60_000])
            raw = "{" + ",".join(f'"pl_slow_{i}":{r.choice(["1.0", "2", "1e6"])}' for i in range(n)) + "}"
            return Case(e_view, b64z(raw.encode()), f"{n:,} prefix keys pl_slow_<i>")
        if k == 2:  # huge key
            n = r.choice([100, 10_000, 500_000])
            key = "pl_slow_" + big_text(r, n)
            raw = json.dumps({key: 2.0})
            return Case(e_view, b64z(raw.encode("utf-8", "surrogatepass")), f"prefix key of {n:,} characters")
        if k == 3:  # duplicate keys
            key = r.choice(keys)
            return Case(e_view, b64z(f'{{"{key}":1,"{key}":2}}'.encode()), f"{key} twice")
        if k == 4:  # deep
            raw, how = deep_raw(r)
            return Case(e_view, b64z(f'{{"{r.choice(keys)}":{raw}}}'.encode()), how)
        # known keys, hostile values
        entries = []
        for _ in range(r.randint(1, 6)):
            key = r.choice(keys + ["pl_slow_gpu", "pl_slow_\u202egpu", "unknown", "", "__proto__"])
            raw = r.choice([r.choice(ODD_NUMBERS), r.choice(WRONG_TYPES), json.dumps(r.choice(MARKUP)),
                            json.dumps(hostile_name(r, r.choice(["control", "bidi", "surrogate", "blank"]), "gpu")[0]),
                            huge_list_raw(r, (100, 5000))[0], huge_string_raw(r, (100, 201, 100_000))[0]])
            entries.append(f"{json.dumps(key)}:{raw}")
        raw = "{" + ",".join(entries) + "}"
        return Case(e_view, b64z(raw.encode("utf-8", "surrogatepass")), f"{len(entries)} entries: {raw[:60]!r}")

    # ----- names
    def _name_case(self, kind: str, must_refuse: bool, slots: list[str] | None = None) -> Case:
        r = self.rng
        slot = r.choice([s for s in (slots or NAME_SLOTS) if self.slots[s]])
        name, how = hostile_name(r, kind, r.choice(["gpu", "host", "fc1", "pool0", "edge-switch", "my run"]))
        fn, arg = place_name(r, self.slots[slot], slot, name)
        return Case(fn, arg, f"{slot} = {ascii(name)[:60]} ({how})", must_refuse)

    def name_markup(self) -> Case:
        return self._name_case("markup", False)

    def name_control(self) -> Case:
        return self._name_case("control", True)

    def name_bidi(self) -> Case:
        return self._name_case("bidi", True)

    def name_bidi_mark(self) -> Case:
        return self._name_case("bidi-mark", True)

    def name_surrogate(self) -> Case:
        r = self.rng
        if r.random() < 0.15:  # as raw UTF-8 bytes of a surrogate (json reads bytes with surrogatepass)
            label, doc = self.base()
            d = copy.deepcopy(doc)
            d["name"] = SENT
            raw = dumps(d, r).encode().replace(SENT.encode(), b"run\xed\xa0\x80", 1)
            return Case(e_scenario, raw, f"{label}: scenario.name = b'run\\xed\\xa0\\x80' (UTF-8 bytes of U+D800)", True)
        return self._name_case("surrogate", True)

    def name_blank(self) -> Case:
        return self._name_case("blank", True)

    def _alike_case(self, make: Callable[[str], tuple[str, str] | None], what: str) -> Case:
        r = self.rng
        for _ in range(50):
            slot = r.choice([s for s in ALIKE_SLOTS if self.slots[s]])
            made = place_alike(r, self.slots[slot], slot, make)
            if made is not None:
                return Case(made[0], made[1], made[2], True)
        return Case(e_distinct, ["gpu", "GPU"], f"{what}: fallback", True)

    def name_lookalike(self) -> Case:
        return self._alike_case(lambda n: look_alike(self.rng, n), "look-alike")

    def name_multi(self) -> Case:
        return self._alike_case(lambda n: multi_letter_alike(self.rng, n), "multi-letter look-alike")

    # ----- identities, lesson links, sign-ins
    def token_forged(self) -> Case:
        r = self.rng
        real = access.new_token()
        body, sig = real.split(".")
        other = access.new_token().split(".")[1]
        kind = r.choice(["43 As", "random signature", "flipped", "swapped", "no signature", "type", "huge",
                         "unicode"])
        flip = r.randrange(len(real))
        token = {"43 As": "A" * 43, "random signature": f"{body}.{''.join(r.choices(string.ascii_letters, k=22))}",
                 "flipped": real[:flip] + ("B" if real[flip] != "B" else "C") + real[flip + 1:],
                 "swapped": f"{body}.{other}", "no signature": body,
                 "type": r.choice([None, 42, [real], {"t": real}, real.encode()]),
                 "huge": real * r.choice([2, 1000, 100_000]), "unicode": body + "．" + sig}[kind]
        return Case(e_token, token, f"cookie: {kind}", must_refuse=True)

    def lesson_link(self) -> Case:
        r = self.rng
        digits = ["²", "٣", "۷", "߂", "१", "১", "๓", "１", "𝟙", "Ⅳ", "0x1", "-1", "1e3", "9999", "3 ", "", "..", "1.1.1"]
        lt = r.choice([".".join(r.choices(digits, k=r.randint(1, 6))), "1" * r.choice([3, 401, 10_000]),
                       ".".join(str(r.randint(-3, 12)) for _ in range(r.randint(1, 8))), None, 7, ["1"]])
        lesson = r.choice(["ring-allreduce", "no-such-lesson", "../../etc/passwd", "RING-ALLREDUCE", None, 3, "",
                           "ring-allreduce\x00"])
        return Case(e_lesson_link, (lesson, lt), f"l={ascii(lesson)[:30]} lt={ascii(lt)[:40]}")

    def sign_in_guess(self) -> Case:
        r = self.rng
        token = access.teacher_token()
        i = r.randrange(len(token))
        guess = r.choice([token[:-1], token + "x", token[:i] + chr(ord(token[i]) ^ 1) + token[i + 1:], token.upper(),
                          "", None, 12345, "a" * 10_000, token[::-1], " " + token])
        return Case(e_sign_in, guess, f"guess: {ascii(guess)[:40]}", must_refuse=True)

    # ----- what one student does to the class
    def upload_hostile(self) -> Case:
        from lab.testing import hostile_onnx

        r = self.rng
        kind = r.choice(["conv bomb", "constant bomb", "batch bomb", "shape bomb", "external data", "classes",
                         "harmless", "empty", "truncated"])
        if kind == "conv bomb":
            n = r.choice([2, 8, 64, 1996])
            return Case(e_upload, hostile_onnx.conv_bomb(convs=n), f"upload: {n} convolutions sharing one weight", True)
        if kind == "constant bomb":  # 1 GiB a sample is over the budget; 64 MiB is within it
            side = r.choice([4096, 16384])
            return Case(e_upload, hostile_onnx.constant_bomb(side=side), f"upload: ConstantOfShape [{side}, {side}]",
                        side > 4096)
        if kind == "batch bomb":  # 256 kB a sample is within the budget: the server prices it at a batch of 65,536
            return Case(e_upload, hostile_onnx.batch_bomb(), "upload: ConstantOfShape [batch, 65536]")  # and never runs it
        if kind == "shape bomb":
            d = r.choice([30, 40])
            return Case(e_upload, hostile_onnx.shape_bomb(doublings=d), f"upload: a shape doubled {d} times", True)
        if kind == "external data":
            where = r.choice(hostile_onnx.EXTERNAL_PLACES)
            path = r.choice(["app.py", "README.md", "/etc/passwd", "no-such-file.bin", "../identity.key"])
            return Case(e_upload, hostile_onnx.external_data(path, where), f"upload: {where} naming {path}", True)
        if kind == "classes":
            n = r.choice([0, -3, "classes"])
            return Case(e_upload, hostile_onnx.classes(n), f"upload: {n!r} classes", True)
        if kind == "harmless":
            return Case(e_upload, hostile_onnx.linear(), "upload: a 64 -> 10 linear network")
        if kind == "empty":
            return Case(e_upload, b"", "upload: an empty file", True)
        data = hostile_onnx.linear()
        return Case(e_upload, data[: r.randrange(1, len(data))], "upload: a truncated file", True)

    def address_forged(self) -> Case:
        r = self.rng
        forged = r.choice(["10.1.2.3", "127.0.0.1", "", "::1", "x" * 100, "10.0.0.1, 10.0.0.2"])
        header = r.choice(["X-Forwarded-For", "x-forwarded-for", "X-Real-IP", "Forwarded"])
        kind = r.choice(["direct", "undeclared proxy", "declared proxy"])
        if kind == "direct":  # a browser that reached the server writes a header
            return Case(e_address, ("10.0.0.9", {header: forged}, r.random() < 0.5, forged),
                        f"address: direct, {header}: {forged[:20]}", True)
        if kind == "undeclared proxy":  # nginx's proxy_pass passes the browser's header on
            return Case(e_address, (None, {header: forged}, False, forged),
                        f"address: undeclared proxy, {header}: {forged[:20]}", True)
        # a declared proxy appends the address it saw after whatever the browser wrote
        return Case(e_address, (None, {"X-Forwarded-For": f"{forged}, 10.0.0.9"}, True, forged),
                    f"address: declared proxy after {forged[:20]!r}", True)

    def rejoin_removed(self) -> Case:
        r = self.rng
        name = r.choice(["Mallory", "mallory", "Mal", "Someone else", "M​allory", "Eve"])
        how = r.choice(["as given", "lower", " spaced ", "upper"])
        code_of = {"as given": lambda c: c, "lower": str.lower, " spaced ": lambda c: f"  {c} ",
                   "upper": str.upper}[how]
        return Case(e_rejoin, (code_of, name), f"rejoin: code {how}, name {ascii(name)}", True)

    def report_link(self) -> Case:
        r = self.rng
        link = r.choice(["javascript:alert(1)", "JavaScript:alert(1)", " javascript:alert(1)", "\tjavascript:x",
                         "java\nscript:alert(1)", "data:text/html,<script>alert(1)</script>", "vbscript:x",
                         "file:///etc/passwd", "http://", "https://", "//evil.example/x", "http://a b/",
                         "http://localhost:8501@evil.example/", "HTTP://localhost:8501/", "ftp://x/y",
                         "http://localhost:8501/placement?s=abc", "https://lab.example.org/training"])
        ok = link in ("http://localhost:8501/placement?s=abc", "https://lab.example.org/training")
        return Case(e_report_link, link, f"report link: {ascii(link)[:50]}", not ok)

    def pins_hostile(self) -> Case:
        r = self.rng
        kind = r.choice(["markup", "control", "bidi", "surrogate", "blank"])
        return self._name_case(kind, kind != "markup", ["pin.operator", "pin.device"])


FAMILIES: list[tuple[str, str, bool]] = [  # (label, method, name family)
    ("scenario: deep nesting", "scn_deep", False),
    ("scenario: huge strings", "scn_strings", False),
    ("scenario: huge lists/objects", "scn_lists", False),
    ("scenario: odd numbers", "scn_numbers", False),
    ("scenario: wrong types", "scn_types", False),
    ("scenario: duplicate keys", "scn_dupkeys", False),
    ("scenario: truncated/random", "scn_broken", False),
    ("scenario: non-UTF-8 bytes", "scn_bytes", False),
    ("topology: over the caps", "topo_caps", False),
    ("topology: mutations", "topo_mut", False),
    ("link ?s=: random base64", "url_random", False),
    ("link ?s=: zlib bombs", "url_bombs", False),
    ("link ?s=: mutated docs", "url_mut", False),
    ("view ?v=: random/bombs", "view_random", False),
    ("view ?v=: hostile values", "view_values", False),
    ("names: markdown/html", "name_markup", True),
    ("names: control chars", "name_control", True),
    ("names: bidi overrides", "name_bidi", True),
    ("names: bidi marks", "name_bidi_mark", True),
    ("names: lone surrogates", "name_surrogate", True),
    ("names: blank-looking", "name_blank", True),
    ("names: look-alikes", "name_lookalike", True),
    ("names: multi-letter alikes", "name_multi", True),
    ("pins: hostile names", "pins_hostile", True),
    ("identity: forged cookies", "token_forged", True),
    ("lesson links: ?l= and ?lt=", "lesson_link", False),
    ("sign-ins: near guesses", "sign_in_guess", True),
    ("uploads: priced", "upload_hostile", True),
    ("proxies: written addresses", "address_forged", True),
    ("removals: joining again", "rejoin_removed", True),
    ("report links", "report_link", True),
]


# ---------------------------------------------------------------------------------------------
# Running and classifying
# ---------------------------------------------------------------------------------------------
class Timeout(BaseException):  # not an Exception: the library's own handlers do not swallow it
    pass


def _alarm(signum, frame):
    raise Timeout()


def last_lab_frame(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(LAB_DIR)]
    if not frames:
        return "(no lab frame)"
    f = frames[-1]
    return f"{f.filename[len(str(ROOT)) + 1:]}:{f.lineno} in {f.name}: {(f.line or '').strip()[:90]}"


@dataclass
class Stats:
    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    refused_long: int = 0
    crash: int = 0
    slow: int = 0
    breach: int = 0
    max_s: float = 0.0
    breaches: list = field(default_factory=list)
    longs: list = field(default_factory=list)


@dataclass
class Report:
    crash_types: Counter = field(default_factory=Counter)
    crash_examples: dict = field(default_factory=dict)  # type -> [(family, desc, exc, frame)]
    slow: list = field(default_factory=list)  # (seconds, family, desc)
    timeouts: int = 0
    view_most_values: tuple = (0, "")
    view_longest_key: tuple = (0, "")
    view_most_notices: tuple = (0, "")
    view_bad_keys: int = 0
    view_bad_key_example: str | None = None


def run_case(fam: str, case: Case, st: Stats, rep: Report, cap: float) -> None:
    st.inputs += 1
    outcome, message = "accepted", ""
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, cap)
    t0 = time.perf_counter()
    try:
        result = case.fn(case.arg)
        dt = time.perf_counter() - t0
        signal.setitimer(signal.ITIMER_REAL, 0)
        if case.fn is e_view:
            values, notices = result
            if len(values) > rep.view_most_values[0]:
                rep.view_most_values = (len(values), case.desc)
            for k in values:
                c = viewstate.control_for(k)
                if c is not None and c.prefix:  # the part after the prefix names a device
                    try:
                        check_name(k[len(next(p for p in viewstate.VIEW if k.startswith(p) and viewstate.VIEW[p].prefix)):],
                                   "bench")
                    except LabError:
                        rep.view_bad_keys += 1
                        if rep.view_bad_key_example is None:
                            rep.view_bad_key_example = case.desc
            longest = max((len(k) for k in values), default=0)
            if longest > rep.view_longest_key[0]:
                rep.view_longest_key = (longest, case.desc)
            if len(notices) > rep.view_most_notices[0]:
                rep.view_most_notices = (len(notices), case.desc)
            if not values and notices:
                bad = [n for n in notices if len(n) > MAX_MESSAGE or TB_RE.search(n)]
                outcome, message = ("refused-long", bad[0]) if bad else ("refused", notices[0])
    except Timeout:
        dt = time.perf_counter() - t0
        outcome = "timeout"
        rep.timeouts += 1
    except LabError as exc:
        dt = time.perf_counter() - t0
        signal.setitimer(signal.ITIMER_REAL, 0)
        message = str(exc)
        if case.fn is e_view:
            outcome = "crash"
            crash(fam, case, exc, rep)
        else:
            outcome = "refused-long" if len(message) > MAX_MESSAGE or TB_RE.search(message) else "refused"
    except BaseException as exc:  # noqa: BLE001 - anything else is what this bench looks for
        dt = time.perf_counter() - t0
        signal.setitimer(signal.ITIMER_REAL, 0)
        if isinstance(exc, KeyboardInterrupt):
            raise
        outcome = "crash"
        crash(fam, case, exc, rep)
    st.max_s = max(st.max_s, dt)
    if dt > SLOW_S or outcome == "timeout":
        st.slow += 1
        rep.slow.append((dt, fam, case.desc))
    if outcome == "accepted":
        st.accepted += 1
        if case.must_refuse:
            st.breach += 1
            if len(st.breaches) < 3:
                st.breaches.append(case.desc)
    elif outcome == "refused":
        st.refused += 1
    elif outcome == "refused-long":
        st.refused_long += 1
        if len(st.longs) < 3:
            st.longs.append((case.desc, len(message), message[:160]))
    elif outcome == "crash":
        st.crash += 1


def crash(fam: str, case: Case, exc: BaseException, rep: Report) -> None:
    name = type(exc).__name__
    rep.crash_types[name] += 1
    ex = rep.crash_examples.setdefault(name, [])
    if len(ex) < 3:
        ex.append((fam, case.desc, repr(exc)[:160], last_lab_frame(exc)))


def warm_up(bases: list) -> None:
    """First calls (the confusables table, caches) outside any input's time."""
    fold("warm-up")
    for _, doc in bases:
        sc = Scenario.from_json(json.dumps(doc))
        Scenario.from_url_param(sc.to_url_param())
        Topology.from_json(json.dumps(doc["topology"]))
    viewstate.decode(viewstate.encode({"ar_n": 5}))
    from lab.testing import hostile_onnx

    e_upload(hostile_onnx.linear())  # the converter, torchvision and sympy load here, not in a timed input
    _class_store()


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget from start-up (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-family", type=int, default=150, help="inputs per family (default 150)")
    args = ap.parse_args()
    # The identities are signed with a key of a data folder of the bench's own, and the guesses aim at a token
    # of the bench's own: nothing of a server's is read or written.
    os.environ["LAB_DATA"] = tempfile.mkdtemp(prefix="bench-hostile-")
    os.environ["LAB_TEACHER_TOKEN"] = secrets.token_urlsafe(24)
    logging.getLogger("lab.jobs.access").setLevel(logging.ERROR)  # a failed sign-in's log line per guess
    if args.smoke:
        args.seconds, args.per_family = 30.0, 2
        print(SMOKE_NOTE, flush=True)
    deadline = T_START + args.seconds

    bases = load_bases()
    warm_up(bases)
    slots = usable_slots(bases)
    fz = Fuzz(random.Random(args.seed), bases, slots, Bombs(json.dumps(bases[0][1])))
    stats = {label: Stats() for label, _, _ in FAMILIES}
    rep = Report()
    cut_short = False
    for _ in range(args.per_family):
        for label, method, _ in FAMILIES:
            now = time.perf_counter()
            if now >= deadline:
                cut_short = True
                break
            case = getattr(fz, method)()
            cap = min(CAP_S, max(1.5, deadline + 2.0 - time.perf_counter()))
            run_case(label, case, stats[label], rep, cap)
        if cut_short:
            break
    signal.setitimer(signal.ITIMER_REAL, 0)

    names = {label for label, _, is_name in FAMILIES if is_name}
    # Which entry points each family reaches is fixed by its generator.
    fam_entry = {
        "scenario": "Scenario.from_json", "topology": "Topology/Scenario.from_json", "link": "from_url_param",
        "view": "view.decode", "names": "check_name/distinct, docs", "pins": "Scenario.from_json",
        "identity": "access.owner_id", "lesson": "lesson link", "sign-ins": "Roster.sign_in",
        "uploads": "onnx_models.keep", "proxies": "access.client_address", "removals": "join_class",
        "report": "report.link.check_link"}
    rows = []
    tot = Stats()
    for label, _, _ in FAMILIES:
        s = stats[label]
        rows.append([label, fam_entry[label.split(":")[0].split()[0]], s.inputs, s.accepted, s.refused, s.refused_long, s.crash,
                     s.slow, s.breach if label in names else "-", f"{s.max_s:.3f}"])
        for f in ("inputs", "accepted", "refused", "refused_long", "crash", "slow", "breach"):
            setattr(tot, f, getattr(tot, f) + getattr(s, f))
        tot.max_s = max(tot.max_s, s.max_s)
    rows.append(["total", "", tot.inputs, tot.accepted, tot.refused, tot.refused_long, tot.crash, tot.slow,
                 tot.breach, f"{tot.max_s:.3f}"])
    print(f"Hostile input: seed {args.seed}, budget {args.seconds:g} s, {args.per_family} per family, "
          f"bases: {', '.join(b[0] for b in bases)}"
          + ("" if not cut_short else " (budget spent before every family had all its inputs)"))
    print(table(["family", "entry", "inputs", "accepted", "refused", "refused-long", "crash", "slow", "breach",
                 "max s"], rows))
    k = ROSTER._fails.get(GUESSER_AT, (0, 0.0, 0.0))[0]
    print(f"sign-ins: {k} wrong guesses read from one client over {_now[0]:.0f} s of the server's clock (the others "
          f"were refused unread while it waited); it now waits {ROSTER.wait(GUESSER_AT):.0f} s before the next")
    print(f"\nelapsed {time.perf_counter() - T_START:.1f} s; slow = over {SLOW_S:g} s; "
          f"timeouts (>{CAP_S:g} s or the budget): {rep.timeouts}")
    print(f"view links: most values accepted from one link {rep.view_most_values[0]:,} "
          f"({rep.view_most_values[1][:60]}); longest accepted key {rep.view_longest_key[0]:,} characters; "
          f"most notices {rep.view_most_notices[0]:,}; accepted prefix keys whose device part check_name refuses: "
          f"{rep.view_bad_keys}" + (f" (first: {rep.view_bad_key_example[:60]})" if rep.view_bad_key_example else ""))
    if rep.crash_types:
        print("\ncrashes by type: " + ", ".join(f"{k} {v}" for k, v in rep.crash_types.most_common()))
        for name, ex in rep.crash_examples.items():
            for fam, desc, r, frame in ex:
                print(f"  {name} [{fam}] {desc[:110]}\n      {r}\n      at {frame}")
    for label, _, _ in FAMILIES:
        s = stats[label]
        for desc in s.breaches:
            print(f"breach [{label}] accepted: {desc[:140]}")
        for desc, n, msg in s.longs:
            print(f"refused-long [{label}] {desc[:80]}: {n} chars: {msg[:100]!r}")
    for dt, fam, desc in sorted(rep.slow, reverse=True)[:5]:
        print(f"slow {dt:.2f} s [{fam}] {desc[:120]}")
    if args.smoke:
        print(SMOKE_NOTE)
    score("hostile", [("inputs", tot.inputs), ("refused", tot.refused + tot.refused_long), ("crashes", tot.crash),
                      ("breaches", tot.breach), ("slowest", tot.max_s, "s")])


if __name__ == "__main__":
    main()
