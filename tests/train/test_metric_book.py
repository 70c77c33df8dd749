"""Rank 0's book of a data-parallel job: the gathered step records become metric rows whose idle time, throughput
and wall clock follow their definitions, checked on records whose answers are worked out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lab.store.schema import JOB_WORKER, METRIC_COLUMNS
from lab.train.metric_book import MetricBook
from lab.train.step_record import StepRecord


def record(step, *, ready, end, comm, loss=1.0, samples=8, sent=100.0):
    return StepRecord(step, loss, 0.5, comm, 0.0, 0.0, math.nan, ready, end, sent, sent, samples, 0.0)


def col(row, name):
    return row[2 + METRIC_COLUMNS.index(name)]


def test_idle_is_the_wait_for_the_slowest_worker_capped_at_the_collective():
    book = MetricBook(2)
    book.start(100.0, 2)
    book.note(1, loss=0.7, test_acc=0.5)
    # worker 0 was ready at 101.0, worker 1 at 101.4: worker 0 waited 0.4 s of its 0.6 s collective; worker 1's
    # own collective took 0.2 s, none of it idle.
    rows = book.rows([np.array([record(1, ready=101.0, end=101.6, comm=0.6)]),
                      np.array([record(1, ready=101.4, end=101.6, comm=0.2)])])
    w0, w1, job = rows
    assert (w0[:2], w1[:2], job[:2]) == ((1, 0), (1, 1), (1, JOB_WORKER))
    assert col(w0, "t_idle") == pytest.approx(0.4) and col(w0, "t_comm") == pytest.approx(0.2)
    assert col(w1, "t_idle") == 0.0 and col(w1, "t_comm") == pytest.approx(0.2)
    assert col(w0, "samples_per_s") == pytest.approx(8 / 1.6)  # from the attempt's start to the step's end
    assert col(job, "loss") == 0.7 and col(job, "test_acc") == 0.5 and col(job, "bytes_sent") == 200.0
    assert col(job, "samples_per_s") == pytest.approx(16 / 1.6) and col(job, "wall") == pytest.approx(1.6)


def test_a_later_flush_spans_from_the_last_end_and_a_restart_counts_wall_time_from_the_first_start():
    book = MetricBook(1)
    book.resumed_from = 50.0
    book.start(100.0, 1)
    book.rows([np.array([record(3, ready=100.5, end=101.0, comm=0.1)])])
    (w0, job), = [book.rows([np.array([record(4, ready=101.5, end=102.0, comm=0.1)])])]
    assert col(w0, "samples_per_s") == pytest.approx(8 / 1.0)  # 101.0 -> 102.0
    assert col(w0, "wall") == pytest.approx(52.0) and col(job, "wall") == pytest.approx(52.0)
    assert math.isnan(col(job, "loss"))  # rank 0 noted no loss for step 4


def test_a_compressed_sync_weights_the_workers_losses_into_the_jobs():
    book = MetricBook(2, job_loss=lambda losses: (losses * np.array([[1.0], [3.0]])).sum(0) / 4)
    book.start(0.0, 2)
    book.note(1, loss=9.0)  # a finite all-reduced loss is replaced by the weighted one
    rows = book.rows([np.array([record(1, ready=0.5, end=1.0, comm=0.1, loss=2.0)]),
                      np.array([record(1, ready=0.5, end=1.0, comm=0.1, loss=4.0)])])
    assert col(rows[-1], "loss") == pytest.approx((2.0 + 12.0) / 4)
