"""lab.view.jobs: the plain data the Jobs and Training pages show."""

from lab.view import jobs as job_views
from lab.view.jobs import start_phase
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore


def test_start_phase_says_where_a_job_is_on_its_way(tmp_path):
    s = RunStore(tmp_path / "runs.db")
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=2, steps=50))
    rid = s.create_run(sc)
    assert start_phase(s, rid, 3) == "queued, number 3 in the queue"
    assert start_phase(s, rid, 1) == "queued, number 1 in the queue"
    s.set_status(rid, "running")
    assert start_phase(s, rid) == "starting the launcher"
    s.job_records.add_event(rid, "started")
    assert start_phase(s, rid) == "starting workers (0 of 2 ready)"
    s.job_records.set_heartbeats(rid, [{"worker": 0, "attempt": 0, "pid": 1, "step": 0, "phase": "busy", "t": 0.0}])
    assert start_phase(s, rid) == "starting workers (1 of 2 ready)"
    s.job_records.set_heartbeats(rid, [{"worker": w, "attempt": 0, "pid": 1, "step": 0, "phase": "busy", "t": 0.0} for w in (0, 1)])
    assert start_phase(s, rid) == "joining the group"
    s.job_records.add_event(rid, "data")
    assert start_phase(s, rid) == "first step"
    s.add_metrics(rid, [{"step": 7, "worker": -1, "loss": 1.0}])
    assert start_phase(s, rid) == "step 7 of 50"
    s.set_status(rid, "done")
    assert start_phase(s, rid) == "step 7 of 50"


def test_stage_summary_and_table_read_as_the_jobs_page_lists_them():
    import pandas as pd

    from lab.view.jobs import event_summary, event_table

    d = {"summary": "worker 1 died", "action": "restart", "world": 2, "owner": None, "groups": [], "other": "x"}
    assert event_summary(d) == "summary: worker 1 died; action: restart; world: 2"
    assert len(event_summary({"summary": "x" * 1000})) == 300
    ev = pd.DataFrame({"event": ["submitted", "started"], "t": [100.0, 102.5], "attempt": [0, 0],
                       "step": [None, 0], "worker": [None, None], "detail": [{"owner": "s1"}, {"world": 3}]})
    tab = event_table(ev)
    assert list(tab["time since submitted (s)"]) == [0.0, 2.5]
    assert list(tab.detail) == ["owner: s1", "world: 3"] and list(tab.event) == ["submitted", "started"]


def test_heartbeat_ages_stopped_by_and_labels():
    import pandas as pd

    from lab.jobs.access import TEACHER
    from lab.view.jobs import heartbeat_ages, job_labels, shown_times, stopped_by

    beats = pd.DataFrame({"worker": [0, 1], "progress_t": [90.0, None], "phase": ["busy", None]})
    assert heartbeat_ages(beats, now=100.0) == ([0, 1], [10.0, 0.0], ["busy", ""])
    assert [stopped_by(TEACHER, "me"), stopped_by("me", "me"), stopped_by("abc", "me")] == \
        ["the teacher", "you", "session abc"]
    table = pd.DataFrame({"id": ["r1"], "status": ["done"], "owner": ["you"], "name": ["mlp"],
                          "submitted": [0.0], "start": [60.0], "end": [None]})
    assert job_labels(table) == {"r1": "r1 · done · you · mlp"}
    shown = shown_times(table)
    assert str(shown.start.iloc[0]) == "1970-01-01 00:01:00" and pd.isna(shown.end.iloc[0])


def test_the_what_if_reads_its_table_and_lists_the_groups():
    import pandas as pd

    from lab.view.jobs import WHATIF_JOBS, group_table, whatif_requests
    from lab.scenario.catalogue import preset
    from lab.scenario.groups import resource_groups

    rows = pd.DataFrame(WHATIF_JOBS)
    rows.loc[len(rows)] = ["half-typed", "D", None, 1.0, 0.0, "any"]  # no tasks yet: left out
    rows.loc[2, "type"] = "gpu"
    reqs = whatif_requests(rows)
    assert [r.name for r in reqs] == WHATIF_JOBS["job"]
    assert reqs[0].work == 2.0e15 and reqs[0].type is None and reqs[2].type == "gpu" and reqs[3].submit == 5.0
    groups = resource_groups(preset("gpu-npu"))
    tab = group_table(groups)
    assert list(tab.group) == [g.name for g in groups]
    assert list(tab["matmul per device (TFLOP/s)"]) == [g.speed / 1e12 for g in groups]


def test_the_training_pages_plain_data():
    import pandas as pd

    from lab.view.jobs import (bytes_note, compression_conflict, default_device, run_to_watch,
                                run_totals, worker_labels)
    from lab.scenario.document import Compression, default_scenario

    assert worker_labels({"devices": ["gpu", "fpga"], "server_rank": 2}, [0, 1, 2]) == \
        {0: "worker 0 (gpu)", 1: "worker 1 (fpga)", 2: "parameter server"}
    job = pd.DataFrame({"wall": [0.5, 1.5], "samples_per_s": [None, 200.0]})
    per = pd.DataFrame({"bytes_sent": [1e6, 2e6]})
    assert run_totals(job, per) == {"wall_s": 1.5, "samples_per_s": 200.0, "sent_mb": 3.0}
    assert run_totals(job.assign(samples_per_s=None), per)["samples_per_s"] is None
    runs = pd.DataFrame({"id": ["c", "b", "a"], "status": ["done", "running", "done"]})
    assert [run_to_watch(runs, "a"), run_to_watch(runs, "gone"), run_to_watch(runs.iloc[[0, 2]], None)] == ["a", "b", "c"]
    assert [default_device(["cpu", "gpu"], ["cpu"], 0), default_device(["cpu", "gpu"], ["x"], 0),
            default_device(["cpu"], [], 1)] == [0, 1, 0]
    tr = default_scenario().training
    assert compression_conflict(tr) == ""
    assert "gradient all-reduce only" in compression_conflict(tr.replace(
        sync="param_server", compression=Compression(kind="group_topk")))
    assert bytes_note({"bytes_kind": "measured"}) == "Bytes are measured (counted by the lab ring / parameter server)."
    assert "gloo does not count" in bytes_note({"bytes_kind": "modelled"})


def test_the_progress_line_names_the_phase_and_the_runs_settings(tmp_path):
    from lab.view.jobs import progress_line

    store, sc = RunStore(tmp_path / "runs.db"), default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=2, steps=50, optimizer="adabelief"))
    rid = store.create_run(sc)
    assert progress_line(store, store.get_run(rid), 2) == \
        "queued: queued, number 2 in the queue · AdaBelief, 2 workers, allreduce · plain local processes"
    store.set_status(rid, "running")
    assert progress_line(store, store.get_run(rid)).startswith("running: starting the launcher · ")


def test_the_queue_line_names_what_holds_the_server_and_when_the_job_should_start(tmp_path):
    from lab.view.jobs import queue_line, seconds_left

    s = RunStore(tmp_path / "runs.db")
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=2, steps=100))
    old = s.create_run(sc, status="done")  # what a run like these took here: 0.02 s a step
    s.update_run(old, start=1000.0, end=1002.0)
    long = s.create_run(sc.replace(training=sc.training.replace(steps=1000)), status="running")
    s.add_metrics(long, [{"step": 250, "worker": -1, "loss": 1.0}])
    ahead = s.create_run(sc)
    assert seconds_left(s, long, elapsed=10.0) == 30.0  # 250 steps in 10 s: 750 left at that pace
    assert seconds_left(s, ahead) == 2.0  # 100 steps at 0.02 s, from the finished run
    info = {"position": 2, "ahead": [{"run_id": ahead, "yours": False}],
            "running": [{"run_id": long, "yours": False, "elapsed": 10.0, "yielded": False}], "capacity": 1,
            "slice_s": 5.0, "student_running": False}
    assert queue_line(s, info) == ("number 2 in the queue, behind 1 queued job; another student's job runs (10 s in, "
                                   "about 30 s left); the jobs ahead need about 2 s.")
    first = dict(info, position=1, ahead=[])
    assert queue_line(s, first) == ("number 1 in the queue; another student's job runs (10 s in, about 30 s left); a "
                                    "job that has run 5 s yields to yours, so yours starts beside it within about 5 s.")
    yielded = dict(first, running=[dict(info["running"][0], yielded=True, elapsed=75.0)])
    assert "(1 min 15 s in, about 3 min 45 s left) and yields: it runs at the lowest priority." in queue_line(s, yielded)


def test_a_scheduler_that_keeps_failing_is_said_and_a_passing_error_is_not():
    from lab.view.jobs import recent_failures

    assert recent_failures([(100.0, "the scheduler: OSError: disk full")], now=110.0) == ""
    many = [(100.0 + k, f"the scheduler: OSError: disk full {k}") for k in range(4)]
    assert recent_failures(many, now=110.0) == ("4 errors in the last 5 minutes; the newest: the scheduler: "
                                                "OSError: disk full 3")
    assert recent_failures(many, now=1000.0) == ""  # long ago


def test_the_scheduler_logs_what_it_catches_and_keeps_it_for_the_page(tmp_path, monkeypatch, caplog):
    """A scheduling error is logged with its traceback and kept in failures (the Jobs page shows a repeated one)."""
    from lab.jobs.manager import JobManager

    jm = JobManager(tmp_path / "runs.db", warm=False)

    def broken():
        raise OSError("disk full")

    monkeypatch.setattr(jm, "_reap", broken)
    jm._closed = False
    jm.queue.add("x", "o")  # something to do, so the loop runs
    with caplog.at_level("ERROR", logger="lab.jobs"):
        try:
            jm._schedule()
        except OSError as exc:
            jm._failed("the scheduler", exc)
    assert jm.failures and "OSError: disk full" in jm.failures[-1][1]
    assert any("the scheduler failed" in r.getMessage() for r in caplog.records)


def test_a_fault_drill_has_two_workers_and_outlasts_its_fault():
    from lab.scenario.document import default_scenario

    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=1, steps=5))
    drill, name = job_views.fault_drill(sc, "kill", 1, 7, "recover", 3)
    tr = drill.training
    assert (tr.workers, tr.steps, tr.fault, tr.fault_worker, tr.fault_step, tr.fault_policy, tr.checkpoint_every) == \
        (2, 17, "kill", 1, 7, "recover", 3)
    assert name == f"{sc.name} · kill worker 1 at step 7"
    assert "the command line" in job_views.read_only_line(None) and "another session" in job_views.read_only_line("x")
    assert job_views.released_line({"killed": [1, 2], "checkpoint_files_removed": 3}).startswith(
        "Released: 2 process(es) ended, 3 checkpoint")


def test_rank_nodes_lists_which_cluster_node_ran_each_rank_of_each_attempt():
    import pandas as pd

    from lab.view.jobs import rank_nodes

    node = {"node": "a" * 40, "ip": "10.0.0.2", "host": "pc2", "pid": 11}
    ev = pd.DataFrame({"event": ["submitted", "started", "alarm", "started"], "attempt": [None, 0, 0, 1],
                       "detail": [{}, {"nodes": [dict(node, rank=0), dict(node, rank=1, ip="10.0.0.3")]}, {},
                                  {"nodes": [dict(node, rank=0)]}]})
    tab = rank_nodes(ev)
    assert tab[["attempt", "rank", "address"]].values.tolist() == [[0, 0, "10.0.0.2"], [0, 1, "10.0.0.3"],
                                                                   [1, 0, "10.0.0.2"]]
    assert set(tab.node) == {"a" * 12}
    local = pd.DataFrame({"event": ["started"], "attempt": [0], "detail": [{"world": 2, "cpus": [0, 1]}]})
    assert rank_nodes(local).empty


def test_the_queue_rules_say_where_jobs_run_and_the_what_if_reads_in_three_numbers(tmp_path):
    from types import SimpleNamespace

    from lab.jobs.manager import JobManager

    here = JobManager(tmp_path / "runs.db", warm=False, ray_address="", capacity=2)
    line = job_views.queue_rules(here)
    assert "at most 2 job(s) at a time" in line and f"{here.book.total} worker slots" in line
    assert job_views.slot_words(here) == "local worker slots"
    there = JobManager(tmp_path / "runs.db", warm=False, ray_address="auto")
    assert "placed by the Ray cluster" in job_views.queue_rules(there) and "worker slots" not in \
        job_views.queue_rules(there)
    assert job_views.slot_words(there) == "slots on the Ray cluster"
    s = SimpleNamespace(makespan=12.345, mean_wait=1.25, utilisation=0.456)
    assert job_views.whatif_metrics(s) == [("Makespan (s)", "12.3"), ("Mean wait in the queue (s)", "1.2"),
                                           ("Device utilisation (%)", "46")]
    assert job_views.whatif_columns(["any", "gpu"])["type"]["options"] == ["any", "gpu"]
