"""The Compression page's grid: variants beside torch's hooks, and the sentences on where each one wins."""
from __future__ import annotations

import pytest

from lab.errors import LabError
from lab.jobs import grid
from lab.jobs.variants import compression_label, full_label, settings_of, short_label, variant_key
from lab.scenario.document import Compression, default_scenario
from lab.train.layout import check_scenario


def test_the_hooks_join_the_grid_with_the_scenarios_rank_and_warmup():
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(compression=Compression(rank=3, warmup=4, sharing="dense")))
    items = grid.grid_scenarios(sc, ("dense", "powersgd", "fp16_hook", "bf16_hook"))
    assert len(items) == 12 and len({name for _, name in items}) == 12
    got = {(s.training.optimizer, grid.variant_of(s.training.to_dict())) for s, _ in items}
    assert got == {(o, v) for o in grid.COMPARED_OPTIMIZERS for v in ("dense", "powersgd", "fp16_hook", "bf16_hook")}
    for s, name in items:
        c = s.training.compression
        if c.kind == "powersgd":
            assert (c.rank, c.warmup) == (3, 4) and "PowerSGD rank 3" in name
        check_scenario(s)
    with pytest.raises(LabError, match="grid runs some of"):
        grid.grid_scenarios(sc, ("dense", "zip"))
    with pytest.raises(LabError, match="grid runs some of"):
        grid.grid_scenarios(sc, ())


def test_a_hooks_settings_that_do_not_apply_do_not_split_its_repeats():
    tr = default_scenario().training
    a = settings_of({"training": tr.replace(compression=Compression(kind="fp16_hook", ratio=0.1)).to_dict()})
    b = settings_of({"training": tr.replace(compression=Compression(kind="fp16_hook", ratio=0.2, rank=5)).to_dict()})
    assert variant_key(a) == variant_key(b)
    p1 = settings_of({"training": tr.replace(compression=Compression(kind="powersgd", rank=1)).to_dict()})
    p2 = settings_of({"training": tr.replace(compression=Compression(kind="powersgd", rank=2)).to_dict()})
    assert variant_key(p1) != variant_key(p2) and compression_label(p2) == "PowerSGD rank 2"


def row(variant, label, acc, kb, ms, status="done"):
    return {"variant": variant, "label": label, "status": status, "final_test_acc": acc,
            "bytes_per_worker_step": kb * 1e3, "s_per_step": ms / 1e3, "optimizer": "adam"}


def test_where_each_wins_names_the_winner_of_each_measure():
    rows = [row("dense", "dense", 0.90, 70.0, 5.0), row("dense", "dense", 0.92, 70.0, 7.0),
            row("gtk_ef", "GTK", 0.88, 1.2, 6.0), row("powersgd", "PSGD", 0.89, 4.0, 4.0),
            row("fp16_hook", "FP16", 0.99, 35.0, 9.0, status="failed")]  # a failed run counts for nothing
    words = grid.where_each_wins(rows)
    assert words[0] == "Highest final test accuracy: dense (91.0 %)."
    assert words[1] == "Fewest bytes per worker per step: GTK (1.20 kB)."
    assert words[2] == "Shortest step: PSGD (4.0 ms)."
    assert words[3] == "Most accurate within a tenth of dense's bytes (7.00 kB): PSGD (89.0 %)."
    assert grid.where_each_wins(rows[:2]) == []  # one variant: nothing to compare


def test_fused_runs_are_their_own_variant_and_say_so():
    tr = default_scenario().training
    plain = settings_of({"training": tr.to_dict()})
    old = {k: v for k, v in tr.to_dict().items() if k != "fused"}  # stored before the setting existed
    assert variant_key(settings_of({"training": old})) == variant_key(plain)
    fused = settings_of({"training": tr.replace(fused=True).to_dict()})
    assert variant_key(fused) != variant_key(plain)
    assert short_label(fused) == "Adam fused · dense" and short_label(plain) == "Adam · dense"
    assert "fused True" in full_label(fused) and "PowerSGD rank" not in full_label(fused)
    psgd = settings_of({"training": tr.replace(compression=Compression(kind="powersgd", rank=2)).to_dict()})
    assert "PowerSGD rank 2" in full_label(psgd) and "ratio" not in full_label(psgd)
