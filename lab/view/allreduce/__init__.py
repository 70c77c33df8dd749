"""The All-reduce page's model: one all-reduce set up from the page's controls (``model``), its tables
(``tables``) and the measurement on this machine (``measurement``)."""

from lab.comm.measure import human_bytes
from lab.view.allreduce.measurement import HEAD as MEASURED_HEAD
from lab.view.allreduce.measurement import fit_problem, measure, measured
from lab.view.allreduce.model import (IDENTICAL_KEYS, INTRO, STEPS_HEAD, TIMING_HEAD, TOPOLOGY_KEYS, AllReduce,
                                      bytes_moved, compute, moved_step, next_step, participant_fixes, prepare, ring,
                                      step_buttons, step_fixes, step_through, timing, trigger, trigger_head,
                                      uniform)
from lab.view.allreduce.tables import (algorithms_table, bytes_table, compute_from_table, compute_table, idle_table,
                                       measured_table, ring_bytes_sentence, step_times_table, transfers_table)

__all__ = ["human_bytes", "MEASURED_HEAD", "fit_problem", "measure", "measured", "IDENTICAL_KEYS", "INTRO",
           "STEPS_HEAD", "TIMING_HEAD", "TOPOLOGY_KEYS", "AllReduce", "bytes_moved", "compute", "moved_step",
           "next_step", "participant_fixes", "prepare", "ring", "step_buttons", "step_fixes", "step_through", "timing",
           "trigger", "trigger_head", "uniform", "algorithms_table", "bytes_table", "compute_from_table",
           "compute_table", "idle_table", "measured_table", "ring_bytes_sentence", "step_times_table",
           "transfers_table"]
