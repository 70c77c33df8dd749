"""The Jobs page's model (:mod:`.page`, :mod:`.whatif`) and the plain data it shares with the Training, Compare,
Fidelity and Placement pages: the job list (:mod:`.table`), where a job is on its way (:mod:`.progress`), one
job's details (:mod:`.detail`), and a stored run and the runs a picker offers (:mod:`.runs`)."""

from lab.view.jobs.detail import (BEATS_CAPTION, EVENT_COLUMNS, error_line, heartbeat_ages, owner_word, rank_nodes,
                                  read_only_line, released_line, event_summary, event_table, stopped_by)
from lab.view.jobs.page import (DRILL, LIMITS_INTRO, MISSING, RELEASE_HELP, TEACHER_LINE, WRONG_TOKEN, Board, Desk,
                                Job, drill_workers, fault_drill, has_teacher, intro, queue_rules, slot_words)
from lab.view.jobs.progress import queue_line, seconds_left, seconds_per_step, start_phase
from lab.view.jobs.runs import (IMPLEMENTATIONS, bytes_note, compression_conflict, default_device, progress_line,
                                run_label, run_picker, run_to_watch, run_totals, worker_labels)
from lab.view.jobs.table import (JOB_COLUMNS, alarm_lines, has_active, job_labels, log_tails, overview,
                                 recent_failures, shown_times, slot_timeline)
from lab.view.jobs.whatif import (HEADER, WHATIF_CAPTION, WHATIF_JOBS, Policy, WhatIf, group_table, topology_label,
                                  what_if, whatif, whatif_columns, whatif_intro, whatif_metrics, whatif_requests,
                                  whatif_start)

__all__ = [
    "BEATS_CAPTION", "EVENT_COLUMNS", "error_line", "heartbeat_ages", "owner_word", "rank_nodes", "read_only_line",
    "released_line", "event_summary", "event_table", "stopped_by",
    "DRILL", "LIMITS_INTRO", "MISSING", "RELEASE_HELP", "TEACHER_LINE", "WRONG_TOKEN", "Board", "Desk", "Job",
    "drill_workers", "fault_drill", "has_teacher", "intro", "queue_rules", "slot_words",
    "queue_line", "seconds_left", "seconds_per_step", "start_phase",
    "IMPLEMENTATIONS", "bytes_note", "compression_conflict", "default_device", "progress_line", "run_label",
    "run_picker", "run_to_watch", "run_totals", "worker_labels",
    "JOB_COLUMNS", "alarm_lines", "has_active", "job_labels", "log_tails", "overview", "recent_failures",
    "shown_times", "slot_timeline",
    "HEADER", "WHATIF_CAPTION", "WHATIF_JOBS", "Policy", "WhatIf", "group_table", "topology_label", "what_if",
    "whatif", "whatif_columns", "whatif_intro", "whatif_metrics", "whatif_requests", "whatif_start",
]
