"""lab.jobs.comparison: variants over repeats, time to a target, noise verdicts, export (the Compare page's model
and page: tests/view/test_view_compare.py, tests/pages/test_page_compare.py)."""

import math

import pandas as pd
import pytest

from lab.jobs import comparison
from lab.jobs import variants
from lab.scenario.document import Compression, default_scenario
from lab.store.runs import JOB_WORKER, RunStore


def scenario(optimizer="adam", kind="none", seed=0, steps=40):
    sc = default_scenario()
    tr = sc.training.replace(optimizer=optimizer, seed=seed, steps=steps, workers=2,
                             compression=Compression(kind=kind, ratio=0.01, error_feedback=kind != "none"))
    return sc.replace(training=tr)


def store_run(st: RunStore, sc, accs, step_s=0.01, sent_per_step=1000.0):
    """A finished run whose test accuracy is ``accs[i]`` at step 10 (i + 1), with wall = step × step_s."""
    rid = st.create_run(sc, name=variants.run_name(variants.settings_of(sc.to_dict())), status="done")
    rows = []
    for step in range(1, 10 * len(accs) + 1):
        acc = accs[step // 10 - 1] if step % 10 == 0 else None
        rows.append({"step": step, "worker": JOB_WORKER, "loss": 2.0 / step, "test_acc": acc, "wall": step * step_s})
        for w in range(2):
            rows.append({"step": step, "worker": w, "bytes_sent": sent_per_step})
    st.add_metrics(rid, rows)
    return rid


def test_time_to_target_is_the_first_evaluation_at_or_above_it(lab_db):
    st = RunStore(lab_db)
    rid = store_run(st, scenario(), [0.5, 0.85, 0.91, 0.89], step_s=0.02)
    m = st.metrics(rid)
    r = comparison.run_result(rid, m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER], 0.9, workers=2)
    assert r.steps_to_target == 30  # by hand: accuracies at steps 10, 20, 30 are 0.5, 0.85, 0.91
    assert r.seconds_to_target == pytest.approx(30 * 0.02)
    assert r.final_acc == 0.89 and r.best_acc == 0.91
    assert r.step_time == pytest.approx(0.02)
    assert r.bytes_per_step == pytest.approx(1000.0)  # per worker and step
    never = comparison.run_result(rid, m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER], 0.95, workers=2)
    assert math.isnan(never.steps_to_target)


def test_verdict_follows_the_overlap_of_the_intervals():
    close_a, close_b = comparison.Spread.of([0.90, 0.92, 0.94]), comparison.Spread.of([0.91, 0.93, 0.95])
    far_a, far_b = comparison.Spread.of([0.80, 0.801, 0.802]), comparison.Spread.of([0.95, 0.951, 0.952])
    assert comparison.overlap(close_a, close_b) and not comparison.overlap(far_a, far_b)
    said = comparison.verdict(close_a, close_b)
    assert said.startswith("not distinguishable: with 3 and 3 repeats the means are known only to ±5 and ±5 points "
                           "(95 %, Student's t with 2 and 2 degrees of freedom)"), said
    assert "the means differ by 1 points; about" in said
    assert comparison.verdict(far_a, far_b).startswith("distinguishable")
    assert "one run each" in comparison.verdict(comparison.Spread.of([0.9]), comparison.Spread.of([0.95]))
    # the repeats needed: brute force over n with the same t quantiles and the observed spreads
    a, b = comparison.Spread.of([0.90, 0.91, 0.92]), comparison.Spread.of([0.93, 0.935, 0.94])
    n = comparison.repeats_needed(a, b)
    assert n is not None and n > 3
    assert comparison.t95(n - 1) * (a.sd + b.sd) / math.sqrt(n) < abs(a.mean - b.mean)
    assert comparison.t95(n - 2) * (a.sd + b.sd) / math.sqrt(n - 1) >= abs(a.mean - b.mean)


def test_spread_interval_matches_students_t():
    s = comparison.Spread.of([1.0, 2.0, 3.0, 4.0])
    sd = pd.Series([1.0, 2.0, 3.0, 4.0]).std()
    assert s.half95 == pytest.approx(3.1824 * sd / 2, rel=1e-4)  # a t table: 3.182 for 3 degrees of freedom
    assert (s.lo, s.hi, s.n) == (1.0, 4.0, 4)


def test_seeds_are_repeats_of_one_variant_and_compression_settings_matter():
    a = variants.settings_of(scenario(seed=1).to_dict())
    b = variants.settings_of(scenario(seed=2).to_dict())
    c = variants.settings_of(scenario(kind="group_topk").to_dict())
    assert variants.variant_key(a) == variants.variant_key(b) != variants.variant_key(c)
    assert variants.short_label(c) == "Adam · Group-TopK 1 % + EF"
    name = variants.run_name(c)
    assert all(part in name for part in ("mlp", "Adam", "Group-TopK", "40 steps"))


def test_compare_runs_groups_repeats_and_the_export_has_every_setting(lab_db):
    st = RunStore(lab_db)
    ids = [store_run(st, scenario("adam", "none", seed), [0.5, 0.9 + 0.01 * seed], sent_per_step=4000)
           for seed in range(3)]
    ids += [store_run(st, scenario("adabelief", "group_topk", seed), [0.4, 0.8 + 0.01 * seed],
                      sent_per_step=400) for seed in range(3)]
    cmp = comparison.compare_runs(st, ids, target=0.85)
    table = cmp.table()
    assert list(table.variant) == ["Adam · dense", "AdaBelief · Group-TopK 1 % + EF"]
    assert list(table.repeats) == [3, 3]
    assert list(table["reached 85 %"]) == ["3 of 3", "0 of 3"]
    assert table["bytes vs dense"].iloc[1] == "0.1×"
    assert len(cmp.verdicts) == 1 and cmp.verdicts[0]["verdict"].startswith("distinguishable")
    with_pred = cmp.table({rid: 0.002 for rid in ids[:3]})
    col = "predicted step time (ms, modelled)"
    assert list(with_pred.columns).index(col) == list(with_pred.columns).index("mean step time (ms)") + 1
    assert with_pred[col].iloc[0].startswith("2 ± 0") and with_pred[col].iloc[1] == "—"
    assert len(cmp.accuracy[0].band) == 2 and cmp.accuracy[0].band["min"].iloc[-1] == pytest.approx(0.9)
    frame = comparison.export_frame(cmp.runs, st.metrics(ids))
    for col in ("optimizer", "compression", "ratio", "group_size", "error_feedback", "sharing", "model", "workers",
                "steps", "batch", "lr", "seed", "sync", "emulation", "loss", "test_acc"):
        assert col in frame.columns, col
    assert set(frame.seed) == {0, 1, 2}
    assert comparison.export_filename(cmp.runs) == "runs-6-runs-mlp-adabelief-adam"


def test_many_variants_get_small_multiples_by_compression():
    from lab.figures.compare import band_figure

    curves = [comparison.VariantCurve(f"{o} · {k}", "", o, k, pd.DataFrame({"step": [1, 2], "mean": [0.1, 0.2],
                                                                   "min": [0.1, 0.1], "max": [0.2, 0.3],
                                                                   "n": [2, 2]}), 2)
              for o in ("adam", "adabelief", "maxadabelief") for k in ("dense", "Group-TopK 1 %", "Top-K 1 %")]
    fig = band_figure(curves, "step", "test accuracy (%)", "Test accuracy")
    axes = {t.xaxis for t in fig.data}
    assert len(axes) == 3  # one panel per compression
    assert [a.text for a in fig.layout.annotations] == ["dense", "Group-TopK 1 %", "Top-K 1 %"]


def test_comparison_scenarios_are_optimisers_by_compressions_by_seeds():
    sc = scenario(seed=7)
    gtk = Compression(kind="group_topk", ratio=0.01, error_feedback=True)
    runs = variants.comparison_scenarios(sc, [Compression(), gtk], repeats=3)
    assert len(runs) == 3 * 2 * 3
    keys = {variants.variant_key(variants.settings_of(s.to_dict())) for s, _ in runs}
    assert len(keys) == 6
    for r in range(3):  # repeat r of every variant has the same seed
        assert {s.training.seed for s, _ in runs[6 * r:6 * (r + 1)]} == {7 + r}
    assert all(s.training.allreduce_impl == "ring" and s.training.steps == 40 for s, _ in runs)
    assert all("40 steps" in name and "mlp" in name for _, name in runs)
    with pytest.raises(Exception, match="at most"):
        variants.comparison_scenarios(sc, [Compression()] * 5, repeats=5)


# ---- long runs: the summary from every row, the curves from at most MAX_CURVE_POINTS points -----------

def store_rows(st: RunStore, sc, steps: int, *, eval_every=10, seed=0, walls=True, workers=2, status="done"):
    """A run of ``steps`` steps with noisy loss, test accuracy every ``eval_every`` steps, some walls
    missing (unless ``walls`` is False: none) and per-worker bytes and times (none with ``workers`` 0)."""
    import random

    rng = random.Random(seed)
    rid = st.create_run(sc, status=status)
    rows = []
    for step in range(1, steps + 1):
        acc = 0.5 + 0.45 * step / steps + rng.uniform(-0.05, 0.05) if step % eval_every == 0 else None
        wall = step * 0.01 + rng.uniform(0, 0.001) if walls and rng.random() > 0.1 else None
        rows.append((step, JOB_WORKER, 2.0 / step + rng.uniform(0, 0.1), acc, None, None, None, None, None, None, None,
                     None, None, wall))
        for w in range(workers):
            rows.append((step, w, None, None, rng.uniform(900, 1100), 1000.0, 0.004, 0.002, 0.0001, 0.0005,
                         0.0, 0.0, 50.0, wall))
    st.add_metric_rows(rid, rows)
    return rid


@pytest.mark.parametrize("kw", [dict(), dict(eval_every=7, seed=1), dict(walls=False), dict(workers=0),
                                dict(eval_every=10_000)])
@pytest.mark.parametrize("target", [0.6, 0.9, 0.99])
def test_stored_result_equals_run_result_over_every_row(lab_db, kw, target):
    st = RunStore(lab_db)
    rid = store_rows(st, scenario(), 500, **kw)
    m = st.metrics(rid)
    want = comparison.run_result(rid, m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER], target, workers=2)
    got = comparison.stored_result(st, rid, target, workers=2)
    for field in ("final_acc", "best_acc", "steps_to_target", "seconds_to_target", "step_time", "bytes_per_step"):
        a, b = getattr(got, field), getattr(want, field)
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12), field


def test_the_stores_summary_equals_every_row_read_in_pandas(lab_db):
    from lab.testing.caps import summary_every_row

    st = RunStore(lab_db)
    ids = [store_rows(st, scenario(seed=s), 300, seed=s) for s in range(2)]
    ids += [store_rows(st, scenario(), 50, workers=0, walls=False), st.create_run(scenario(), status="queued")]
    got, want = st.summary(ids), summary_every_row(st, ids)
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12, check_dtype=False)


@pytest.mark.parametrize("column", ["loss", "test_acc"])
@pytest.mark.parametrize("stride", [1, 3, 50])
def test_stored_curve_is_the_bucket_means_of_every_row(lab_db, column, stride):
    st = RunStore(lab_db)
    rid = store_rows(st, scenario(), 1000, eval_every=3)
    m = st.metrics(rid)
    job = m[(m.worker == JOB_WORKER) & m[column].notna()]
    g = job.groupby((job.step - 1) // stride)
    want = pd.DataFrame({"step": g.step.max(), "wall": g.wall.mean(), column: g[column].mean()}).reset_index(drop=True)
    got = comparison.stored_curve(st, rid, column, stride)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12, check_dtype=False)
    if stride == 1:  # every recorded point as it is
        assert list(got[column]) == list(job[column])


def test_a_long_comparison_draws_at_most_max_points_and_summarises_every_row(lab_db, monkeypatch):
    monkeypatch.setattr(comparison, "MAX_CURVE_POINTS", 64)
    st = RunStore(lab_db)
    ids = [store_rows(st, scenario(seed=s), 1000, eval_every=5, seed=s) for s in range(2)]
    short = store_rows(st, scenario("adabelief"), 60, eval_every=5)
    cmp = comparison.compare_runs(st, ids + [short], target=0.8)
    long_loss, short_loss = cmp.loss
    assert long_loss.stride == 16 and short_loss.stride == 1  # ceil(1000 / 64); the short run drawn whole
    assert len(long_loss.band) <= 64 and len(cmp.accuracy[0].band) <= 64 and len(short_loss.band) == 60
    m = st.metrics(ids)
    final = comparison.Spread.of(comparison.run_result(rid, m[(m.run_id == rid) & (m.worker == JOB_WORKER)],
                                     m[(m.run_id == rid) & (m.worker != JOB_WORKER)], 0.8, 2).final_acc for rid in ids)
    assert cmp.rows[0]["_final"] == final  # the summary's numbers come from every row
    # the band: mean and spread of the repeats' bucket means
    a, b = (comparison.stored_curve(st, rid, "loss", 16) for rid in ids)
    assert list(long_loss.band["mean"]) == pytest.approx(list((a.loss + b.loss) / 2))
    assert "at most 64 points" in cmp.drawn_note and "up to 16" in cmp.drawn_note
    assert comparison.compare_runs(st, [short]).drawn_note == ""


def test_same_seed_runs_count_once_and_the_summary_csv_has_settings_and_numbers(lab_db):
    st = RunStore(lab_db)
    a0 = store_run(st, scenario("adam", seed=0), [0.5, 0.88])
    a0_again = store_run(st, scenario("adam", seed=0), [0.5, 0.88])  # the same settings and seed: the same run
    a1 = store_run(st, scenario("adam", seed=1), [0.5, 0.92])
    b0 = store_run(st, scenario("adabelief", seed=0), [0.5, 0.80])
    cmp = comparison.compare_runs(st, [a0, a0_again, a1, b0], target=0.9)
    rows = {r["variant"]: r for r in cmp.rows}
    assert rows["Adam · dense"]["repeats"] == 2 and rows["AdaBelief · dense"]["repeats"] == 1
    assert list(cmp.same_seed) == ["Adam · dense"] and len(cmp.same_seed["Adam · dense"]) == 1
    csv = cmp.summary_frame()
    adam = csv[csv.variant == "Adam · dense"].iloc[0]
    assert adam["optimizer"] == "adam" and adam["workers"] == 2 and "seed" not in csv.columns  # one column a setting
    assert adam["final test accuracy mean (%)"] == pytest.approx(90.0)
    assert adam["final test accuracy min (%)"] == pytest.approx(88.0) and adam["final test accuracy max (%)"] == 92.0
    half = comparison.t95(1) * pd.Series([88.0, 92.0]).std() / math.sqrt(2)
    assert adam["final test accuracy ± 95 % (%)"] == pytest.approx(half)
    assert csv.dtypes["final test accuracy mean (%)"].kind == "f"  # numbers, not "89.4 ± 4.7 (range 88-91.6)"
    one = csv[csv.variant == "AdaBelief · dense"].iloc[0]
    assert math.isnan(one["final test accuracy ± 95 % (%)"])  # one run has no interval


def test_coinciding_curves_keep_both_visible_by_staggered_markers():
    from lab.figures.compare import band_figure

    b = pd.DataFrame({"step": range(1, 61), "mean": [0.5] * 60, "min": [0.4] * 60, "max": [0.6] * 60, "n": [2] * 60})
    curves = [comparison.VariantCurve(label=lab, hover=lab, optimizer=opt, compression="dense", band=b, repeats=2)
              for lab, opt in (("AdaBelief · dense", "adabelief"), ("Max-AdaBelief · dense", "maxadabelief"))]
    fig = band_figure(curves, "step", "accuracy", "Test accuracy")
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    marked = [{i for i, size in enumerate(t.marker.size) if size} for t in lines]
    assert len(lines) == 2 and all(marked) and not (marked[0] & marked[1])  # the same line, markers of both
    assert lines[0].marker.symbol != lines[1].marker.symbol


def test_the_class_pools_its_repeats_with_different_seeds_per_student(lab_db):
    st = RunStore(lab_db)
    assert variants.student_seed(0, "alice") == variants.student_seed(0, "alice") != variants.student_seed(0, "bob")
    sc = scenario("adam")
    mine = variants.comparison_scenarios(sc, [Compression()], repeats=2, optimizers=("adam",),
                                  first_seed=variants.student_seed(0, "alice"))
    assert [s.training.seed for s, _ in mine] == [variants.student_seed(0, "alice"), variants.student_seed(0, "alice") + 1]
    ids = [store_run(st, scenario("adam", seed=s), [0.5, 0.8 + 0.01 * k]) for k, s in enumerate((0, 1, 7, 9))]
    other = store_run(st, scenario("adabelief", seed=0), [0.5, 0.8])
    pooled = comparison.pooled_runs(st, ids[:1])
    assert pooled[0] == ids[0] and set(pooled) == set(ids) and other not in pooled  # the same variant, any seed
    assert comparison.compare_runs(st, pooled).rows[0]["repeats"] == 4


def test_the_comparison_names_the_runs_measured_under_load(lab_db):
    st = RunStore(lab_db)
    ids = [store_run(st, scenario("adam", "none", seed), [0.5, 0.9], sent_per_step=4000) for seed in range(3)]
    assert comparison.compare_runs(st, ids).loaded_words == ""  # runs from before load was recorded
    st.merge_info(ids[0], {"load": {"others_share": 0.05, "cpus": 2}})
    st.merge_info(ids[2], {"load": {"others_share": 0.62, "cpus": 2}})
    st.update_run(ids[2], name="<b>busy</b> run")
    words = comparison.compare_runs(st, ids).loaded_words
    assert words.startswith("1 of the chosen runs") and "<b>busy</b> run (62 %)" in words


def test_an_unfinished_run_has_no_final_accuracy_on_screen_or_in_the_csv(lab_db):
    # mid-comparison: one repeat ended at 84 %, the other is still running after its first evaluation (10 %)
    st = RunStore(lab_db)
    done = store_run(st, scenario(seed=0), [0.5, 0.84])
    running = store_run(st, scenario(seed=1), [0.1])
    st.set_status(running, "running")
    cmp = comparison.compare_runs(st, [done, running], target=0.8)
    row = cmp.rows[0]
    assert row["repeats"] == 2 and row["final test accuracy (%)"].startswith("84") and "1 unfinished" in row[
        "final test accuracy (%)"]
    csv = cmp.summary_frame().iloc[0]
    assert csv["final test accuracy mean (%)"] == pytest.approx(84.0) and csv["finished (count)"] == 1
    assert csv["final test accuracy min (%)"] == pytest.approx(84.0)  # not the running one's 10 %
    st.set_status(done, "running")  # none finished: no final accuracy at all
    row = comparison.compare_runs(st, [done, running], target=0.8).rows[0]
    assert row["final test accuracy (%)"] == "none finished yet"
    assert comparison.compare_runs(st, [done, running], target=0.8).summary_frame().iloc[0]["finished (count)"] == 0
