"""lab.view.compression: the Compression page's model, computed from the forms' values (real gradients, the ring
simulated, the Cholesky study measured) and from the run store for the grid (no process started)."""
from __future__ import annotations


import pytest

from lab.compression.compressors import GroupTopK, TopK
from lab.compression.study import real_gradients
from lab.figures.style import fmt_seconds
from lab.jobs.grid import GRID_DEFAULT, grid_scenarios
from lab.scenario.document import default_scenario
from lab.store.runs import JOB_WORKER, RunStore
from lab.view import compression as view
from lab.view.section import form_keys
from lab.view.state import VIEW
from tests.view.sections import by_key, figure_json

FORMS = view.COMPRESSORS_FORM + view.RING_FORM + view.CHOLESKY_FORM
DEFAULTS = {k: VIEW[k].default(default_scenario()) for k in form_keys(FORMS)}
GTK = "Group-TopK (top k in every group)"


def test_the_forms_name_the_pages_controls_of_the_view_table_each_once():
    keys = form_keys(FORMS)
    assert view.RING_FORM[0][1] == ("ring_kind", 2)  # the compressor's long name gets room at 1024 px
    assert len(keys) == len(set(keys)) and all(VIEW[k].page == "compression" for k in keys)
    assert {k for k, c in VIEW.items() if c.page == "compression"} == {*keys, "cp_grid_variants"}
    assert {k for k in keys if VIEW[k].advanced} == {"cp_group", "cp_seed", "ch_damping"}   # hidden in lesson mode
    assert dict(VIEW["cp_source"].setting.names)["real"] == "real (one backward pass on digits)"


def test_the_default_compressors_on_one_real_gradient_with_every_byte_counted():
    n = real_gradients("mlp", 1, 64, 0)[0].numel()
    s = by_key(view.compressors(DEFAULTS))
    assert list(s) == ["cp_gradient", "cp_err", "cp_time", "cp_bytes", "cp"]
    assert f"**{n:,} entries**" in s["cp_gradient"].intro and not s["cp_gradient"].notices
    assert all(s[k].kind == "measured" and s[k].caption for k in ("cp_err", "cp_time", "cp_bytes"))
    assert (s["cp_err"].side, s["cp_time"].side) == ("left", "right")
    for k in ("cp_err", "cp_time", "cp_bytes"):
        assert figure_json(s[k])["data"], k
    # the table: 4 ratios x 3 sparse compressors + fp16 + none, bytes as the payload says
    table = s["cp"].table
    assert len(table) == 14
    gt = next(r for r in table if r["compressor"] == GTK and r["ratio"] == 0.01)
    assert gt["kept (entries)"] == GroupTopK(0.01, 1024).kept(n) and gt["bytes (B)"] == 24 + 6 * gt["kept (entries)"]


def test_a_generated_gradient_and_a_ratio_group_topk_refuses():
    s = by_key(view.compressors({**DEFAULTS, "cp_source": "generated", "cp_n": 20_000, "cp_group": 100,
                                 "cp_ratios": (0.1, 0.001)}))
    assert "**20,000 entries**" in s["cp_gradient"].intro
    (n,) = s["cp_gradient"].notices
    assert n.level == "warning" and "k = 0" in n.text and "[0.001]" in n.text and "group size 100" in n.text
    assert {r["ratio"] for r in s["cp"].table if r["compressor"] == GTK} == {0.1}


def test_the_ring_with_another_compressor_and_applying_it_to_the_scenario():
    n = real_gradients("mlp", 1, 64, 0)[0].numel()
    s = by_key(view.ring(DEFAULTS))                      # 4 workers, Group-TopK at the scenario's ratio
    assert list(s) == ["ring_fill", "ring_bytes"] and all(x.kind == "modelled" for x in s.values())
    assert f"Each worker kept **{GroupTopK(0.01, 1024).kept(n):,}**" in s["ring_bytes"].text
    assert "for 4 workers" in s["ring_fill"].caption and figure_json(s["ring_fill"])["data"]
    v = {**DEFAULTS, "ring_workers": 3, "ring_kind": "topk", "ring_ratio": 0.02}
    s = by_key(view.ring(v))
    assert f"Each worker kept **{TopK(0.02).k_for(n):,}**" in s["ring_bytes"].text
    assert "for 3 workers" in s["ring_fill"].caption
    sc, said = view.apply_ring(default_scenario(), v)
    c = sc.training.compression
    assert (c.kind, c.ratio, c.group_size) == ("topk", 0.02, 1024)
    assert said == "Scenario compression: global Top-K, ratio 0.02, group size 1024."


@pytest.mark.parametrize("matrix,why", [("weight gradient, transformer q (32x32)", "symmetric"),
                                        ("weight gradient, MLP layer 1 (128x64)", "square")])
def test_cholesky_refuses_weight_gradients(matrix, why):
    s = by_key(view.cholesky({**DEFAULTS, "ch_matrix": matrix}))
    assert list(s) == ["ch_app", "ch_refusal"] and s["ch_app"].kind == "measured"
    (n,) = s["ch_refusal"].notices
    assert n.text.startswith("Not applicable") and why in n.text and n.icon == ":material/block:"


def test_cholesky_on_a_gram_matrix_and_without_damping():
    v = {**DEFAULTS, "ch_matrix": "Gram of the digit images (64x64)", "ch_damping": 0.001}
    s = by_key(view.cholesky(v))
    assert list(s) == ["ch_app", "ch", "ch_methods", "ch_sum"]
    assert [r["bytes (B)"] for r in s["ch_methods"].table] == [64 * 64 * 4, 64 * 65 // 2 * 4, 64 * 65 // 2 * 4]
    assert "Adding the factors gives" in s["ch_sum"].caption and figure_json(s["ch"])["data"] and figure_json(s["ch_sum"])["data"]
    s = by_key(view.cholesky({**v, "ch_damping": 0.0}))
    assert "positive-definite" in s["ch_refusal"].notices[0].text


def test_tables_carry_their_units_and_every_row():
    rows = [{"label": "Top-K", "ratio": 0.01, "kept": 10, "density": 0.01, "rel_error": 0.5, "bytes": 104,
             "wire_format": "fp32 + int32", "t_compress": 0.002}]
    t = view.compressor_table(rows)
    assert t == [{"compressor": "Top-K", "ratio": 0.01, "kept (entries)": 10, "density (%)": 1.0,
                  "relative error (%)": 50.0, "bytes (B)": 104, "wire format": "fp32 + int32",
                  "time": fmt_seconds(0.002)}]
    a = {"shape": (3, 4), "square": False, "asymmetry": 0.1, "symmetric": False, "min_eigenvalue": -1.0,
         "positive_definite": False}
    assert view.cholesky_applicability_table(a)[0]["shape"] == "3×4"
    m = [{"method": "L", "values": 6, "bytes": 24, "t_pack": 1e-3, "t_unpack": 2e-3, "rel_error": 0.0}]
    assert view.cholesky_table(m)[0]["bytes (B)"] == 24 and view.cholesky_table(m)[0]["unpack"] == fmt_seconds(2e-3)




def test_the_grid_intro_and_its_button_say_what_it_queues():
    comp = default_scenario().training.compression
    assert view.queue_label(GRID_DEFAULT) == "Queue 9 runs"     # three optimisers x the three default variants
    intro = view.grid_intro(comp)
    assert f"group size {comp.group_size}, shared by **sparse all-gather**" in intro
    assert f"(rank {comp.rank}, after {comp.warmup} plain steps" in intro
    assert "**dense" not in view.grid_intro(comp.__class__(**{**comp.to_dict(), "sharing": "dense"}))
    assert view.grid_runs(default_scenario(), GRID_DEFAULT) == grid_scenarios(default_scenario(), GRID_DEFAULT)
    assert view.variant_label("powersgd", rank=4) == "PowerSGD rank 4 (torch's hook)"


def test_grid_results_table_and_figure_from_the_store(lab_db):
    store = RunStore(lab_db)
    assert view.grid([], False) == ([], False) and not view.grid_active([])
    ids = []
    for k, (sc, name) in enumerate(grid_scenarios(default_scenario())[:3]):  # adam: dense, gtk, gtk + EF
        rid = store.create_run(sc.replace(training=sc.training.replace(steps=4)), name=name, status="done")
        rows = [{"step": s, "worker": JOB_WORKER, "test_acc": 0.5 + 0.1 * k, "wall": 0.01 * s} for s in range(5)]
        rows += [{"step": s, "worker": w, "bytes_sent": 1000.0 * (k + 1), "t_compress": 0.001 * k}
                 for s in range(1, 5) for w in range(2)]
        store.add_metrics(rid, rows)
        ids.append(rid)
    sections, active = view.grid(ids, False)
    assert not active and not view.grid_active(ids)
    s = by_key(sections)
    table = s["cp_grid_results"].table
    assert [r["final test accuracy (%)"] for r in table] == pytest.approx([50.0, 60.0, 70.0])
    assert [r["sent per worker per step (kB)"] for r in table] == pytest.approx([1.0, 2.0, 3.0])
    assert [r["time per step (ms)"] for r in table] == pytest.approx([10.0, 10.0, 10.0])
    assert [r["variant"] for r in table] == ["dense (fp32 ring)", "Group-TopK 1%", "Group-TopK 1% + error feedback"]
    assert s["cp_grid_results"].kind == "measured" and view.grid(ids, True)[0][-1].kind == "emulated"
    assert "(the grid)" in figure_json(s["cp_grid"])["layout"]["title"]["text"]
    wins = s["cp_grid_wins"]
    words = [wins.values[k] for k in sorted(wins.values)]
    assert "Fewest bytes per worker per step: dense (fp32 ring) (1.00 kB)." in words  # the made-up bytes above
    assert "Highest final test accuracy: Group-TopK 1% + error feedback (70.0 %)." in words
    assert wins.text.splitlines() == [f"- {{w{i}}}" for i in range(len(words))]       # each filled in as text
    store.set_status(ids[0], "running")
    assert view.grid_active(ids) and view.grid(ids, False)[1]
