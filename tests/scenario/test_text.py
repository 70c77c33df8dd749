"""Bounded input and one name check: nesting, message length, duplicate keys, look-alike and blank names,
for the scenario and topology loaders, the pins and the command line's --set and --name."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.errors import MAX_MESSAGE, LabError
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, check_pins, default_scenario
from lab.scenario.text import MAX_DEPTH, check_distinct, check_name, fold, is_blank, loads, look_alike, shown, skeleton
from lab.scenario.topology import Topology

BASE = default_scenario().to_dict()
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Where a nested or huge value goes in a scenario document: (section, key).
PLACES = [("training", "lr"), ("training", "steps"), ("training", "optimizer"), ("training", "emulate"),
          ("training", "worker_devices"), ("compression", "ratio"), ("training", "pins"), ("scenario", "format"),
          ("scenario", "name"), ("device", "memory"), ("device", "name"), ("device", "throughput"),
          ("link", "bandwidth"), ("link", "a"), ("topology", "name")]


def nested(depth: int, kind: str = "list") -> str:
    return ("[" * depth + "1" + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


def document_with(section: str, key: str, raw: str) -> str:
    """The default scenario's JSON with ``raw`` (JSON source text) as the value of ``key`` in ``section``."""
    doc = json.loads(json.dumps(BASE))
    marker = "__VALUE__"
    target = {"training": doc["training"], "compression": doc["training"]["compression"], "scenario": doc,
              "device": doc["topology"]["devices"][0], "link": doc["topology"]["links"][0],
              "topology": doc["topology"]}[section]
    target[key] = marker
    return json.dumps(doc).replace(f'"{marker}"', raw)


def refused_briefly(fn, *args) -> LabError:
    """``fn(*args)`` raises a LabError (never RecursionError, MemoryError...) whose text is short."""
    with pytest.raises(LabError) as exc:
        fn(*args)
    assert len(str(exc.value)) <= MAX_MESSAGE, len(str(exc.value))
    return exc.value


# ---- nesting -----------------------------------------------------------------------------------
@pytest.mark.parametrize("section,key", PLACES[:6])
def test_a_list_nested_almost_a_thousand_deep_is_refused_as_too_deep(section, key):
    # 985 levels parse in CPython's json; quoting such a value in a message used to raise RecursionError
    err = refused_briefly(Scenario.from_json, document_with(section, key, nested(985)))
    assert "nested more than 32 levels" in str(err)


@SETTINGS
@given(st.integers(MAX_DEPTH, 1200), st.sampled_from(["list", "object"]), st.sampled_from(PLACES))
def test_any_deep_nesting_anywhere_is_a_short_lab_error(depth, kind, place):
    refused_briefly(Scenario.from_json, document_with(*place, nested(depth, kind)))


@SETTINGS
@given(st.integers(MAX_DEPTH - 4, 1200), st.sampled_from(["list", "object"]),
       st.sampled_from(["name", "description", "devices", "links", "switches"]))
def test_a_topology_file_with_deep_nesting_is_a_short_lab_error(depth, kind, key):
    doc = preset("cxl").to_dict()
    doc[key] = "__VALUE__"
    refused_briefly(Topology.from_json, json.dumps(doc).replace('"__VALUE__"', nested(depth, kind)))


def test_nesting_up_to_the_limit_is_read_and_beyond_it_is_refused():
    assert loads(nested(MAX_DEPTH)) is not None
    with pytest.raises(LabError, match="nested more than"):
        loads(nested(MAX_DEPTH + 1))
    with pytest.raises(LabError, match="nested more than"):
        loads(nested(100_000))  # too deep for the parser itself


# ---- message length ----------------------------------------------------------------------------
def test_a_huge_format_string_or_memory_list_is_quoted_briefly():
    err = refused_briefly(Scenario.from_json, document_with("scenario", "format", json.dumps("f" * 300_000)))
    assert "unsupported format" in str(err) and len(str(err)) < 200
    err = refused_briefly(Scenario.from_json, document_with("device", "memory", json.dumps([1] * 400_000)))
    assert "memory (bytes) must be a number" in str(err) and len(str(err)) < 200


@settings(SETTINGS, max_examples=50)
@given(st.sampled_from(PLACES), st.sampled_from(["text", "list", "object", "int"]), st.integers(1000, 300_000))
def test_any_huge_value_anywhere_gives_a_short_message(place, kind, n):
    raw = {"text": lambda: json.dumps("\u202e" + "x" * n), "list": lambda: json.dumps(["x"] * n),
           "object": lambda: json.dumps({f"k{i}": i for i in range(min(n, 50_000))}),
           "int": lambda: "9" * min(n, 4000)}[kind]()
    refused_briefly(Scenario.from_json, document_with(*place, raw))


def test_a_lab_error_cuts_its_own_message():
    err = LabError("x" * 10_000, where="here")
    assert len(str(err)) == MAX_MESSAGE and str(err).startswith("here: xxx") and str(err).endswith("…")
    assert str(LabError("short", where="w")) == "w: short"


@given(st.recursive(st.one_of(st.integers(), st.text(), st.floats(), st.booleans(), st.none()),
                    lambda inner: st.one_of(st.lists(inner), st.dictionaries(st.text(), inner)), max_leaves=50))
@SETTINGS
def test_shown_is_short_for_any_value(value):
    assert len(shown(value)) <= 80
    assert len(shown(value, 20)) <= 20


def test_shown_survives_what_repr_cannot():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert shown(deep) == "[[[[...]]]]"
    assert shown(10**5000).startswith("<an integer of about")
    assert shown("x" * 10**6).endswith("…") and len(shown("x" * 10**6)) == 80


# ---- duplicate keys ----------------------------------------------------------------------------
def test_a_key_twice_in_one_object_is_refused_and_named():
    text = document_with("training", "lr", '0.1, "lr": 0.2')
    assert json.loads(text)["training"]["lr"] == 0.2  # plain JSON keeps the last silently
    with pytest.raises(LabError, match="the key 'lr' appears twice"):
        Scenario.from_json(text)
    topo = json.dumps(preset("cxl").to_dict()).replace('"name": "host"', '"name": "host", "name": "gpu9"', 1)
    with pytest.raises(LabError, match="the key 'name' appears twice"):
        Topology.from_json(topo)
    with pytest.raises(LabError, match="appears twice"):
        Scenario.from_json(topo)


# ---- names -------------------------------------------------------------------------------------
def renamed(topo: Topology | dict, old: str, new: str) -> dict:
    """``topo`` as a dict with device or switch ``old`` renamed ``new`` (links follow)."""
    d = json.loads(json.dumps(topo if isinstance(topo, dict) else topo.to_dict()))
    for node in d["devices"] + d["switches"]:
        node["name"] = new if node["name"] == old else node["name"]
    for link in d["links"]:
        link["a"] = new if link["a"] == old else link["a"]
        link["b"] = new if link["b"] == old else link["b"]
    return d


@pytest.mark.parametrize("twin", ["gpu ", " gpu", "g\u200bpu", "g\u0440u", "gpu\u00a0", "GPU", "gpu\u2800",
                                  "\uff47\uff50\uff55", "gp\u00adu", "gpu\ufe0f"])
def test_a_name_that_only_looks_like_another_is_refused_beside_it(twin):
    d = renamed(preset("cxl"), "fpga", twin)  # the preset has a device "gpu"
    with pytest.raises(LabError, match="looks like 'gpu', already in the topology"):
        Topology.from_dict(d)
    assert Topology.from_dict(renamed(preset("cxl"), "gpu", twin))  # alone it is a name like any other


def test_look_alike_pools_and_switches_are_refused_too():
    d = preset("two-pools").to_dict()
    d["devices"][1]["pool"] = "p\u043e\u043el0"  # Cyrillic o's: looks like pool0
    with pytest.raises(LabError, match="looks like 'pool0'"):
        Topology.from_dict(d)
    switch = preset("two-pools").switches[0].name
    d = renamed(preset("two-pools"), switch, preset("two-pools").devices[0].name.upper())
    with pytest.raises(LabError, match="looks like"):
        Topology.from_dict(d)


@pytest.mark.parametrize("blank", ["\u3164", "\u2800", "\u0301", "\u0301\u0302", "\u115f", "\u1160", "\uffa0",
                                   "\u200b\u200d", " \u3164 ", "\u2800\u2800", "\U0001d159"])
def test_blank_looking_names_are_refused(blank):
    assert is_blank(blank)
    with pytest.raises(LabError, match="visible character"):
        check_name(blank, "device")
    with pytest.raises(LabError):
        Topology.from_dict(renamed(preset("cxl"), "dpu", blank))
    with pytest.raises(LabError, match="visible character"):
        Scenario.from_json(document_with("scenario", "name", json.dumps(blank)))


def test_names_of_every_script_and_distinct_look_stay_accepted():
    for name in ("é", "e\u0301x", "网卡", "GPU-α", "gpu0", "gpu_1", "Ω-npu", "👍", "a b"):
        assert not is_blank(name), name
        assert check_name(name, "device") == name.replace("e\u0301", "\u00e9")
    d = renamed(renamed(preset("cxl"), "fpga", "gpu2"), "asic", "gpu3")
    assert Topology.from_dict(d)  # gpu, gpu2, gpu3: different names
    assert fold("GPU\u00a0 O") == fold("gpu o") and skeleton("GPU\u00a0 0") == skeleton("GPU O")
    assert fold("gpu") != fold("gpv") and skeleton("gpu") != skeleton("gpv")


@pytest.mark.parametrize("op", ["\ud800", "fc\u202e1", "a\x00", "a\x07", "a\x1b", "\u200b", "\u3164", "a\u2028b"])
def test_bad_operator_and_device_names_in_pins_are_refused(op):
    with pytest.raises(LabError):
        check_pins({op: "gpu"})
    with pytest.raises(LabError):
        check_pins({"fc1": op})
    d = json.loads(json.dumps(BASE))
    d["training"]["pins"] = {op: "gpu"}
    with pytest.raises(LabError, match="training.pins"):
        Scenario.from_dict(d)


def test_pinned_operators_that_only_look_alike_are_refused():
    assert check_pins({"fc1": "gpu", "fc2": "host"}) == (("fc1", "gpu"), ("fc2", "host"))
    for twin in ("FC1", "fc1 ", "f\u04411", "fcl"):
        with pytest.raises(LabError, match="looks like"):
            check_pins({"fc1": "gpu", twin: "host"})


@SETTINGS
@given(st.dictionaries(st.text(max_size=12), st.sampled_from(["gpu", "host", "fpga"]), max_size=6))
def test_pins_that_are_accepted_can_be_shown_by_any_page(pins):
    # The Placement page writes pins out as UTF-8: an accepted pin must encode and must not be blank.
    try:
        checked = check_pins(pins)
    except LabError as exc:
        assert len(str(exc)) <= MAX_MESSAGE
        return
    for op, dev in checked:
        op.encode("utf-8")
        assert not is_blank(op)


# ---- the command line --------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["--name", "run\u202eevil"], ["--name", "run\x07"], ["--name", "\u3164"], ["--name", "x" * 201],
    ["--set", "lr=" + nested(985)], ["--set", "worker_devices=" + nested(40)], ["--set", "optimizer=" + nested(985)],
    ["--set", "steps=" + json.dumps(list(range(400_000)))],
])
def test_the_command_line_refuses_bad_names_and_deep_values_in_one_line(argv, capsys, tmp_path, monkeypatch):
    from lab.train import cli

    monkeypatch.setenv("LAB_DB", str(tmp_path / "runs.db"))
    monkeypatch.setattr(cli, "launch", lambda *a, **k: pytest.fail("a job was started"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lab.train: ") and len(err) <= MAX_MESSAGE + 20, err[:300]


def test_the_command_line_takes_a_plain_run_name(monkeypatch):
    from lab.train import cli

    seen = {}

    def launch(sc, run_id, name=None, ranks=None):
        seen["name"] = name
        raise LabError("stop here")

    monkeypatch.setattr(cli, "launch", launch)
    assert cli.main(["--name", "cafe\u0301 run · 1"]) == 2
    assert seen["name"] == "café run · 1"  # composed form


def test_the_run_names_the_training_page_gives_pass_the_name_check():
    from lab.jobs.variants import comparison_compressions, comparison_scenarios, run_name, settings_of
    from lab.scenario.document import Compression
    from lab.scenario.names import COMPRESSORS, MODELS, OPTIMIZERS

    sc = default_scenario()
    for model in MODELS:
        for opt in OPTIMIZERS:
            for kind in COMPRESSORS:
                tr = sc.training.replace(model=model, optimizer=opt, compression=Compression(kind=kind),
                                         seed=2**31 - 1, steps=100_000)
                name = run_name(settings_of(sc.replace(training=tr).to_dict()))
                assert check_name(name, "run", max_len=200) == name
    for run, name in comparison_scenarios(sc, comparison_compressions(Compression()), repeats=3):
        assert check_name(name, "run", max_len=200) == name


@pytest.mark.parametrize("name", ["1\u200f.2", "gpu\u200e", "\u061cx"])
def test_direction_marks_are_refused_like_overrides(name):
    with pytest.raises(LabError, match="U\\+(200E|200F|061C)"):
        check_name(name, "device")


@pytest.mark.parametrize("a,b", [("dpu", "clpu"), ("edge", "eclge"), ("mlp", "rnlp"), ("dwconv", "dvvconv")])
def test_letters_that_read_as_one_letter_are_look_alikes(a, b):
    assert skeleton(a) == skeleton(b)
    with pytest.raises(LabError, match="looks like"):
        Topology.from_dict(renamed(preset("cxl"), "fpga", b)) if a == "dpu" else check_distinct([a, b], "x")
    assert not look_alike("cpu", "gpu") and not look_alike("gpu0", "gpu")


def test_a_huge_flat_document_is_refused_before_it_is_parsed():
    text = "[" + "[]," * 1_700_000 + "[]]"  # 5 MB of empty lists: shallow, but millions of objects to build
    with pytest.raises(LabError, match="lists and objects"):
        loads(text)
    with pytest.raises(LabError, match="lists and objects"):
        Scenario.from_json(text)
    assert loads('{"a": "[[[[{{{{", "b": [1, [2]]}') == {"a": "[[[[{{{{", "b": [1, [2]]}  # brackets in strings
    assert loads('["\\"", "[\\\\"]') == ['"', "[\\"]  # escaped quotes and backslashes end strings right


def test_a_link_that_unpacks_to_more_than_a_file_may_hold_is_refused():
    import base64
    import zlib

    from lab.scenario.document import UPLOAD_MB

    sc = default_scenario()
    assert Scenario.from_url_param(sc.to_url_param()) == sc
    bomb = zlib.compress(sc.to_json().encode() + b" " * (UPLOAD_MB * 2**20 + 1), 9)  # a valid document, padded
    with pytest.raises(LabError, match=f"more than {UPLOAD_MB} MB"):
        Scenario.from_url_param(base64.urlsafe_b64encode(bomb).decode().rstrip("="))
    cut = zlib.compress(sc.to_json().encode(), 9)[:-6]  # the end of the stream is missing
    with pytest.raises(LabError, match="damaged"):
        Scenario.from_url_param(base64.urlsafe_b64encode(cut).decode().rstrip("="))


@pytest.mark.parametrize("a,b", [("L", "I"), ("gpuL", "gpuI"), ("LI", "IL"), ("b", "в"), ("gpu", "gpv")])
def test_names_a_reader_tells_apart_are_not_look_alikes(a, b):
    assert not look_alike(a, b)
    check_distinct([a, b], "x")


@pytest.mark.parametrize("a,b", [("I", "l"), ("l", "1"), ("GPU 0", "GPU O"), ("p", "р"), ("B", "В"), ("A", "a"),
                                 ("gpu", "GPU"), ("ml", "rnl")])
def test_names_a_reader_could_take_for_each_other_are_refused_side_by_side(a, b):
    assert look_alike(a, b)
    with pytest.raises(LabError, match="looks like"):
        check_distinct([a, b], "x")


def test_the_look_alike_rule_never_refuses_two_ascii_letters_or_digits_a_reader_tells_apart():
    """Brute force over every pair of ASCII letters and digits: only the pairs a reader confuses meet."""
    import string
    chars = string.ascii_letters + string.digits
    pairs = {frozenset((a, b)) for i, a in enumerate(chars) for b in chars[:i] if look_alike(a, b)}
    confusable = {frozenset(p) for p in ("Il", "I1", "l1", "O0")}
    same_case = {frozenset((c, c.upper())) for c in string.ascii_lowercase}
    assert pairs - same_case == confusable


# ---- seat names: near-copies of one name -------------------------------------------------------
# Each shows as "Alice" (or as Alice in capitals, or with a mark a reader passes over): spaces of every width,
# invisible and format characters, marks on or beside a letter, letters of other scripts, full-width and
# mathematical letters, and the ASCII letters and digits a reader confuses.
ALICE_NEAR_COPIES = [
    "Al\u200aice", "Al\u2009ice", "Al\u202fice", "Al\u3000ice", "Al\u00a0ice", "Al ice", "Al\tice", "Alice\n",
    "Alice\u17b4", "Al\u17b4ice", "Ali\u17b5ce", "Alice\u0307", "Al\u0307ice", "A\u0301lice", "Ali\u20ddce",
    "Alic\u00e9", "Alic\u0435\u0308", "Ali\u200dce", "Ali\u200cce", "A\u200blice", "Alice\u2060", "\ufeffAlice",
    "Al\u00adice", "Alic\u034fe", "Alice\ufe0f", "Al\u180eice", "Al\u2063ice", "Alice\U000e0041", "Ali\u115fce",
    "Ali\u3164ce", "Al\u1160ice", "Al\uffa0ice", "Al\u2800ice", "\u0410lice", "\u0430lice", "Alic\u0435",
    "Al\u0456ce", "\u0391lice", "\u0410L\u0406\u0421\u0415", "\uff21\uff4c\uff49\uff43\uff45", "\U0001d400lice",
    "ALICE", "alice", "A1ice", "AIice", "Al\u0131ce",
]


@pytest.mark.parametrize("twin", ALICE_NEAR_COPIES, ids=ascii)
def test_every_near_copy_of_a_name_looks_like_it(twin):
    assert look_alike("Alice", twin) and look_alike(twin, "Alice")
    with pytest.raises(LabError, match="looks like 'Alice'"):
        check_distinct(["Alice", twin], "class", namespace="the class")


def test_the_near_copy_list_is_long_and_all_of_it_is_refused():
    assert len(set(ALICE_NEAR_COPIES)) >= 30
    assert [ascii(n) for n in ALICE_NEAR_COPIES if not look_alike("Alice", n)] == []


@pytest.mark.parametrize("other", ["Alicia", "Alex", "Ali", "Bob", "Alice B", "Alicee", "Aliec", "Malice", "Alina",
                                   "Al1ce", "Алиса", "アリス"])
def test_names_that_differ_are_not_near_copies(other):
    assert not look_alike("Alice", other)
    check_distinct(["Alice", other], "class")


@pytest.mark.parametrize("blank", ["\u17b4\u17b5", "\u200a\u2009", "\u034f", "\ufe0f", "\U000e0041", "\u2063",
                                   "\u0307\u0308", "\u20dd", "\u3000", "\U0001d173"])
def test_a_name_that_shows_as_nothing_is_refused_with_a_clear_message(blank):
    assert is_blank(blank)
    with pytest.raises(LabError, match="must have a visible character"):
        check_name(blank, "class.name", what="your name")


def test_a_seat_name_that_only_looks_like_a_joined_students_is_refused(lab_db):
    from lab.store.runs import RunStore

    store = RunStore(lab_db)
    code = store.class_book.open_class().code
    assert store.class_book.join_class("a", code, "Alice") == "Alice"
    for i, twin in enumerate(n for n in ALICE_NEAR_COPIES if "\t" not in n and "\n" not in n):
        with pytest.raises(LabError, match="looks like the name of a student"):
            store.class_book.join_class(f"b{i}", code, twin)
    with pytest.raises(LabError, match="visible character"):
        store.class_book.join_class("c", code, "\u17b4\u200a\u0307")
    assert store.class_book.join_class("d", code, "Alicia") == "Alicia"
    assert store.class_book.seats() == {"a": "Alice", "d": "Alicia"}
