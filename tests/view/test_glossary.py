"""The About page's glossary: every entry is a term with a plain explanation, and every piece of jargon the page
models use (found by scanning the text of lab/view) has its entry."""

from __future__ import annotations

import ast
import re

from lab.view.about import GLOSSARY
from tests.conftest import ROOT

#: (the glossary term, how a page's text writes it). A page model that starts using a word of this list needs its
#: entry; a new word of the same kind belongs here and in the glossary.
JARGON = (
    ("AdaBelief", r"\bAdaBelief\b"),
    ("algbw and busbw", r"\b(?:alg|bus)bw\b"),
    ("all-reduce", r"\ball-reduce\b"),
    ("alpha-beta model", r"\balpha-beta\b|α-β"),
    ("ASIC", r"\bASICs?\b"),
    ("calibration", r"\bcalibrat(?:ion|ed|e)\b"),
    ("CXL", r"\bCXL\b"),
    ("data parallel", r"\bdata parallel"),
    ("DPU", r"\bDPUs?\b"),
    ("emulated, measured, modelled", r"\bemulated\b"),
    ("error feedback (EF)", r"\berror feedback\b|\bEF\b"),
    ("FPGA", r"\bFPGAs?\b"),
    ("gloo", r"\bgloo\b"),
    ("GPipe", r"\bGPipe\b"),
    ("greedy earliest finish", r"\bearliest[ -]finish\b"),
    ("Group-TopK and Top-K", r"\bGroup-TopK\b|\bTop-K\b"),
    ("HEFT", r"\bHEFT\b"),
    ("held-out set and held-out error", r"\bheld-out\b"),
    ("Kendall's tau", r"\bKendall\b"),
    ("makespan", r"\bmakespan\b"),
    ("Max-AdaBelief", r"\bMax-AdaBelief\b"),
    ("micro-batch", r"\bmicro-batch"),
    ("model parallel", r"\bmodel parallel"),
    ("NPU", r"\bNPUs?\b"),
    ("PCIe", r"\bPCIe\b"),
    ("pipeline bubble", r"\bbubble\b"),
    ("placement", r"\bplacement\b"),
    ("PowerSGD", r"\bPowerSGD\b"),
    ("ring all-reduce", r"\bring all-reduce\b|\breduce-scatter\b"),
    ("warm-up", r"\bwarm-up\b"),
)


def page_texts() -> dict[str, str]:
    """Every string a module of lab/view holds (its captions, intros, help and labels), by file, the glossary
    itself left out."""
    out = {}
    for path in sorted((ROOT / "lab" / "view").rglob("*.py")):
        parts = [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str)]
        if path.name == "about.py":
            parts = [p for p in parts if p not in {t for e in GLOSSARY for t in e}]
        out[str(path.relative_to(ROOT))] = " ".join(parts)
    return out


def test_every_entry_is_a_term_with_a_plain_explanation():
    assert len(GLOSSARY) >= 25
    terms = [t for t, _ in GLOSSARY]
    assert len(set(map(str.lower, terms))) == len(terms), "a term is listed twice"
    assert terms == sorted(terms, key=str.lower), "the glossary is alphabetical, so a reader finds a term"
    for term, meaning in GLOSSARY:
        assert isinstance(term, str) and term.strip() == term and term, repr(term)
        assert isinstance(meaning, str) and len(meaning.split()) >= 6, (term, meaning)
        assert meaning[0].isupper() and meaning.endswith("."), (term, meaning)  # a sentence, or two


def test_every_jargon_word_the_page_models_use_is_in_the_glossary():
    terms = {t for t, _ in GLOSSARY}
    assert {t for t, _ in JARGON} <= terms, sorted({t for t, _ in JARGON} - terms)
    texts = page_texts()
    used = {term for term, pattern in JARGON if any(re.search(pattern, text) for text in texts.values())}
    assert used <= terms
    # the scan finds what the issue named, so it is not passing on an empty page
    assert {"gloo", "HEFT", "error feedback (EF)", "makespan", "algbw and busbw", "Kendall's tau"} <= used, used


def test_the_named_jargon_is_explained_where_the_all_reduce_and_home_pages_first_use_it():
    from lab.view import home
    from lab.view.allreduce import model

    assert "gloo, PyTorch's library of collectives" in home.INTRO and "FPGAs (chips" in home.INTRO
    assert "glossary" in home.INTRO
    assert "nccl-tests" in model.BUSBW_HELP and "S over the time t" in model.ALGBW_HELP
