"""The step record both trainers fill: its fields survive the float rows the processes gather, and a
placement step's record says what its fields mean (the step's span holds its computing, every
process sees the whole batch, a field the trainer does not take is NaN)."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.train.placement_run.executor import PlacementTrainer
from lab.train.step_record import FIELDS, INDEX, StepRecord


def test_a_record_read_back_from_a_gathered_row_keeps_every_field_by_name():
    rec = StepRecord(7, 2.5, 0.1, 0.2, 0.3, 0.4, 10.0, math.nan, 11.0, 1024, 2048, 24, 0.05, 0.09, 0.01)
    row = torch.tensor([rec], dtype=torch.float64).tolist()[0]  # what a gather hands back
    back = StepRecord.of(row)
    for name in FIELDS:
        a, b = getattr(rec, name), getattr(back, name)
        assert (math.isnan(a) and math.isnan(b)) or a == b, name
    assert row[INDEX["end"]] == 11.0 and row[INDEX["sent"]] == 1024


def test_a_one_process_placement_step_fills_its_record():
    tr = Training(model="mlp", parallel="placement", batch_size=24, micro_batches=3, steps=2, lr=0.01)
    t = PlacementTrainer(Scenario("plan", preset("edge"), tr), 0, 1, None, None, launched=False)
    t.setup()
    t.rec.timeline_steps = []
    model, sampler = copy.deepcopy(t.model), copy.deepcopy(t.sampler)  # the step's batch, before it runs
    x, y = sampler.next_batch()
    with torch.no_grad():
        expected = float(F.cross_entropy(model(x.to(t.dtype)), y))
    r = t.train_step(1)
    assert isinstance(r, StepRecord) and r.step == 1
    assert r.loss == pytest.approx(expected, rel=1e-5)  # the three micro-batches' losses add up to the batch's
    assert r.start < r.end and 0 < r.compute <= r.end - r.start
    assert r.samples == 24 and r.sent == r.recv == 0 and r.comm == 0.0  # one process sends nothing
    assert math.isnan(r.ready)  # a placement process does not wait for peers' gradients
    # The process's and the thread's clocks are read one after the other: other threads' share may come out a
    # clock read below zero, never more.
    assert r.main_cpu > 0 and r.other_cpu > -1e-3
