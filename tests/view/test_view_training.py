"""lab.view.training: the Training page's model. Its forms name each field of the Scenario's tables once, the
Scenario they make, what Run and the comparison queue, and the live view of a stored run (no process started)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from lab.figures import training as figs
from lab.scenario.document import COMPRESSION_FIELDS, TRAINING_FIELDS, Compression, default_scenario
from lab.store.runs import JOB_WORKER, RunStore
from lab.view import training as view
from tests.view.sections import by_key, figure_json

ADVANCED = {"tr_impl", "tr_model_width", "tr_seed", "tr_split", "tr_alpha", "tr_exchange", "tr_lr_scaling",
            "tr_fused", "tr_cmp_group", "tr_cmp_sharing", "tr_cmp_ef"}  # what lesson mode hides, from the Scenario as it is


def fields(form):
    return {f.key: f for row in form.rows for f in row.fields}


def drawn(form, values) -> set[str]:
    return {f.key for f in fields(form).values() if f.drawn(values)}


def greyed(form, values) -> set[str]:
    return {f.key for f in fields(form).values() if f.drawn(values) and f.greyed(values)}


def defaults(form) -> dict:
    return {name: setting.default for name, setting in form.table.items() if name in form.names()}


def test_each_field_is_named_once_and_the_forms_cover_the_runs_settings():
    names = view.TRAINING_FORM.names()
    assert len(names) == 16 and set(names) | {"worker_devices"} == {
        "optimizer", "model", "sync", "allreduce_impl", "workers", "steps", "batch_size", "lr", "seed", "split",
        "dirichlet_alpha", "exchange_share", "lr_scaling", "emulate", "fused", "model_width", "worker_devices"}
    assert sorted(view.COMPRESSION_FORM.names()) == sorted(COMPRESSION_FIELDS)
    keys = [*fields(view.TRAINING_FORM), *fields(view.COMPRESSION_FORM)]
    assert len(keys) == len(set(keys)) == 23 and all(k.startswith("tr_") for k in keys)
    assert all(k.startswith("tr_cmp_") for k in fields(view.COMPRESSION_FORM))
    with pytest.raises(ValueError, match="once"):
        type(view.TRAINING_FORM)(TRAINING_FIELDS, view.TRAINING_FORM.rows * 2)


def test_lesson_mode_hides_the_advanced_fields_and_keeps_the_compressor_and_ratio():
    advanced = {f.key for form in (view.TRAINING_FORM, view.COMPRESSION_FORM) for f in fields(form).values()
                if form.setting(f).advanced}
    assert advanced == ADVANCED
    assert not {"tr_cmp_kind", "tr_cmp_ratio"} & advanced


def test_powersgd_takes_a_rank_and_a_warmup_instead_of_a_ratio():
    cp = view.COMPRESSION_FORM
    v = {**defaults(cp), "kind": "powersgd"}
    assert {"tr_cmp_rank", "tr_cmp_warmup"} <= drawn(cp, v) and not {"tr_cmp_ratio", "tr_cmp_group"} & drawn(cp, v)
    assert {"tr_cmp_sharing", "tr_cmp_ef"} <= greyed(cp, v)      # torch's hooks send by their own all-reduces
    assert "tr_cmp_ratio" in greyed(cp, {**v, "kind": "bf16_hook"})
    v = {**v, "kind": "group_topk"}
    assert not {"tr_cmp_rank", "tr_cmp_warmup"} & drawn(cp, v) and not greyed(cp, v)
    assert greyed(cp, {**v, "kind": "topk"}) == {"tr_cmp_group"}
    assert greyed(cp, {**v, "kind": "none"}) == {"tr_cmp_ratio", "tr_cmp_group", "tr_cmp_sharing", "tr_cmp_ef"}
    tr = view.TRAINING_FORM
    assert greyed(tr, defaults(tr)) == {"tr_alpha"} and not greyed(tr, {**defaults(tr), "split": "dirichlet"})
    # the compressors as a one-run sentence names them, the same words as the line under the form
    assert fields(cp)["tr_cmp_kind"].names["none"] == "none (no compression)"


def test_the_forms_values_make_the_scenario_in_one_replace():
    sc = default_scenario()
    settings = {**defaults(view.TRAINING_FORM), "optimizer": "adabelief", "steps": 12, "lr": 0.01}
    comp = {**defaults(view.COMPRESSION_FORM), "kind": "group_topk", "ratio": 0.02, "group_size": 512,
            "error_feedback": True, "sharing": "sparse_ring"}
    new = view.edited(sc, settings, None, comp)
    tr = new.training
    assert (tr.optimizer, tr.steps, tr.lr, tr.workers) == ("adabelief", 12, 0.01, 2)
    assert tr.compression == Compression(kind="group_topk", ratio=0.02, group_size=512, error_feedback=True,
                                         sharing="sparse_ring")
    assert figs.compression_summary(tr.compression.to_dict()) == \
        "Group-TopK, 2 % per group of 512, with error feedback, shared by sparse ring"
    assert view.edited(new, settings, None, comp) is new                  # nothing changed: the same Scenario
    assert view.edited(new, settings, ["gpu", "fpga"], comp).training.worker_devices == ("gpu", "fpga")
    topk = view.edited(new, settings, None, {**comp, "kind": "topk", "error_feedback": False})
    assert figs.compression_summary(topk.training.compression.to_dict()) == \
        "global Top-K, 2 % of all entries, without error feedback, shared by sparse ring"
    # compression needs the gradient all-reduce: the page says so before anything is queued
    ps = view.edited(new, {**settings, "sync": "param_server"}, None, comp)
    assert "gradient all-reduce only" in view.compression_conflict(ps.training)
    assert view.compression_conflict(view.edited(ps, {**settings, "sync": "param_server"}, None,
                                                 {**comp, "kind": "none"}).training) == ""
    psgd = view.edited(sc, settings, None, {**comp, "kind": "powersgd", "rank": 4, "warmup": 5})
    assert (psgd.training.compression.rank, psgd.training.compression.warmup) == (4, 5)
    assert figs.compression_summary(psgd.training.compression.to_dict()).startswith(
        "PowerSGD, rank 4 after 5 plain all-reduce steps")
    assert "powerSGD_hook" in view.IMPLEMENTATIONS                      # the page says which implementation runs
    bf16 = {**comp, "kind": "bf16_hook"}
    assert figs.compression_summary(bf16).startswith("BF16 hook, every entry cast to bf16")
    lesson = view.edited(sc, settings, None, {**comp, "kind": "randomk", "ratio": 0.05})
    assert figs.compression_summary(lesson.training.compression.to_dict()).startswith("Random-K, 5 % of all entries")


def test_a_device_box_per_worker_and_the_server_when_emulating_or_weighting():
    sc = default_scenario()
    settings = defaults(view.TRAINING_FORM)
    assert view.device_boxes(sc, settings) == []
    boxes = view.device_boxes(sc, {**settings, "emulate": True, "sync": "param_server"})
    assert [k for k, _ in boxes] == ["tr_dev_0", "tr_dev_1", "tr_dev_2"]
    assert [b["label"] for _, b in boxes] == ["Worker 0 device", "Worker 1 device", "Server device"]
    names = list(sc.topology.device_names)
    assert all(b["options"] == names and b["value"] in names for _, b in boxes)
    assert len(view.device_boxes(sc, {**settings, "split": "weighted", "workers": 4})) == 4


def test_the_comparison_runs_every_variant_with_the_students_equal_seeds():
    from lab.jobs.variants import settings_of, variant_key

    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(steps=4, workers=1, seed=5))
    items = view.comparison(sc, 2, "student-1")
    assert len(items) == 6 * 2  # three optimisers x {dense, Group-TopK 1 % + EF} x two seeds
    settings = [settings_of(s.to_dict()) for s, _ in items]
    variants: dict = {}
    for s in settings:
        variants.setdefault(variant_key(s), []).append(s["seed"])
    # every variant the same two seeds, this student's (moved from 5 by their owner id, so a class pools)
    first = min(seeds for v in variants.values() for seeds in v)
    assert first != 5 and (first - 5) % 100 == 0
    assert len(variants) == 6 and all(sorted(seeds) == [first, first + 1] for seeds in variants.values())
    assert {s["compression"] for s in settings} == {"none", "group_topk"}
    assert all(s["steps"] == 4 and s["workers"] == 1 for s in settings)
    assert view.comparison(sc, 2, "student-1") == items and view.name_of(sc).endswith("4 steps · seed 5")


class FakeManager(SimpleNamespace):
    capacity = 2

    def sweep(self):
        self.swept = True

    def queue_info(self, run_id):
        return {"position": 1, "ahead": [], "running": [], "capacity": 2, "student_running": False, "slice_s": 30}


def a_run(store, status="running", owner="me", **training):
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(steps=10, **training))
    return store.create_run(sc, name="r", status=status, info={"owner": owner})


def test_no_runs_yet_and_the_polling_that_ends(lab_db):
    store, jm = RunStore(lab_db), FakeManager()
    assert view.watch(store, jm, "me", None, False, False) == view.Watch() and jm.swept
    assert view.watch(store, jm, "me", None, True, False).rerun            # polling with nothing left: rerun
    assert not view.watch(store, jm, "me", None, True, True).rerun          # a submit still under way polls on
    assert not view.polling(store, "me", False) and view.polling(store, "me", True)
    rid = a_run(store, "done")
    assert view.watch(store, jm, "me", None, True, False) == view.Watch(rerun=True)
    assert view.watch(store, jm, "someone else", None, False, False).run_id is None   # the class's: Jobs page
    w = view.watch(store, jm, "me", None, False, False)
    assert (w.run_id, w.can_stop, w.predict) == (rid, False, False)
    assert [s.key for s in w.head] == ["train_run"] and w.head[0].header == f"Run {rid}"
    assert [s.caption for s in w.body] == ["Waiting for the first measurements…"]


def test_a_queued_run_says_its_place_and_can_be_stopped(lab_db):
    store, jm = RunStore(lab_db), FakeManager()
    rid = a_run(store, "queued")
    assert view.polling(store, "me", False)
    w = view.watch(store, jm, "me", rid, True, False)
    assert not w.rerun and w.can_stop and w.progress == 0.0
    head = by_key(w.head)
    assert f"{rid} (queued)" in head["train_active"].caption and "At most 2 run(s)" in head["train_active"].caption
    n = head["train_queue"].notices[0]
    assert n.text.startswith("Your job: number 1 in the queue") and n.icon == ":material/hourglass_top:"
    assert w.progress_text.startswith("queued: queued, number 1 in the queue")
    assert by_key(view.watch(store, jm, "me", rid, True, False).head)["train_queue"].notices
    assert w.training["steps"] == 10


def test_a_failed_or_stopped_run_says_why_as_text(lab_db):
    store, jm = RunStore(lab_db), FakeManager()
    rid = a_run(store)
    store.set_status(rid, "failed", error="no matmul kernel on [x](http://a)\nTraceback ...")
    w = view.watch(store, jm, "me", rid, False, False)
    (n,) = by_key(w.body)["train_error"].notices
    assert (n.level, n.text, n.icon) == ("error", "This run failed: no matmul kernel on [x](http://a)",
                                        ":material/error:")
    store.set_status(rid, "stopped", error="stopped by the teacher")
    assert by_key(view.watch(store, jm, "me", rid, False, False).body)["train_stopped"].notices[0].text == \
        "stopped by the teacher"


def test_a_runs_figures_totals_and_badges_from_its_metrics(lab_db):
    store, jm = RunStore(lab_db), FakeManager()
    rid = a_run(store, "done", optimizer="adabelief")
    store.add_metrics(rid, [{"step": s, "worker": JOB_WORKER, "loss": 2.0 / s, "test_acc": 0.1 * s, "wall": 0.1 * s,
                             "samples_per_s": 640.0} for s in range(1, 11)])
    store.add_metrics(rid, [{"step": s, "worker": w, "t_compute": 0.01, "t_comm": 0.002, "bytes_sent": 1e5}
                            for s in range(1, 11) for w in range(2)])
    w = view.watch(store, jm, "me", None, False, False)
    assert w.predict and w.progress == 1.0 and "done: step 10 of 10" in w.progress_text
    assert figs.optimiser_summary(w.training) == "AdaBelief, multi-tensor (torch._foreach_* operations)"
    s = by_key(w.body)
    assert list(s) == ["train_loss", "train_acc", "train_curves", "train_split"]
    assert (s["train_loss"].side, s["train_acc"].side) == ("left", "right")
    assert len(figure_json(s["train_loss"])["data"]) == 1 and len(figure_json(s["train_acc"])["data"]) == 1
    assert s["train_curves"].kind == "measured" and "every 10 steps" in s["train_curves"].caption
    split = s["train_split"]
    assert split.kind == "measured" and "Bytes are measured" in split.caption
    assert [t["y"][0] for t in figure_json(split)["data"]][:1] == ["worker 0"]
    metrics = dict(split.metrics)
    assert float(metrics["Wall time (s)"]) > 0 and metrics["Throughput (samples/s)"] == "640"
    assert metrics["Sent by all workers (MB, measured)"] == "2.00"
    emulated = a_run(store, "done", emulate=True)
    store.add_metrics(emulated, [{"step": 1, "worker": JOB_WORKER, "loss": 1.0, "wall": 0.1},
                                 {"step": 1, "worker": 0, "t_compute": 0.01}])
    assert by_key(view.watch(store, jm, "me", emulated, False, False).body)["train_split"].kind == "emulated"
