"""A wrong LAB_RAY_ADDRESS: the job fails with a message naming the address and what to check, instead of staying
"running" while Ray retries for minutes."""
from __future__ import annotations

import pytest

from lab.errors import LabError
from tests.conftest import default_with, free_port

pytest.importorskip("ray")


@pytest.mark.parametrize("address", ["no-such-host.invalid:6379", "127.0.0.1:{port}", "[::1]:{port}"])
def test_an_address_that_answers_nothing_is_a_clear_error(address):
    from lab.train.ray_ranks import reach

    address = address.format(port=free_port())
    with pytest.raises(LabError, match="answers no connection") as exc:
        reach(address)
    assert address in str(exc.value) and "ray status" in str(exc.value)


@pytest.mark.parametrize("address", ["6379", "host:port", "host:٣"])
def test_an_address_that_is_not_host_and_port_says_so(address):
    from lab.train.ray_ranks import reach

    with pytest.raises(LabError, match="not auto nor host:port"):
        reach(address)


@pytest.mark.timeout(120)
def test_a_job_handed_to_an_unreachable_cluster_fails_with_the_address(tmp_path, monkeypatch, spawns):
    from lab.jobs.manager import JobManager

    monkeypatch.setenv("LAB_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    address = f"127.0.0.1:{free_port()}"
    jm = JobManager(tmp_path / "runs.db", ray_address=address)
    try:
        job = jm.submit(default_with(steps=3))
        assert jm.wait(job.run_id, timeout=90) == "failed"
        error = jm.store.get_run(job.run_id)["error"]
        assert address in error and "answers no connection" in error
    finally:
        jm.shutdown()


def test_every_call_a_rank_may_make_through_its_writer_names_a_method_of_the_run_store(tmp_path):
    """A rank on another node reaches the run store through its writer by name (``job_records.add_event``): a name
    that no longer resolves would fail only on a cluster."""
    from lab.store.runs import RunStore
    from lab.train.ray_store import RANK_CALLS, RemoteStore

    store = RunStore(tmp_path / "runs.db")
    for name in RANK_CALLS:
        target = store
        for part in name.split("."):
            target = getattr(target, part)
        assert callable(target), name
    remote = RemoteStore(writer=None)
    assert callable(remote.job_records.add_event) and callable(remote.set_status)
    with pytest.raises(AttributeError):
        remote.delete_run  # noqa: B018 - a rank may not delete a run
    with pytest.raises(AttributeError):
        remote.job_records.claim  # noqa: B018 - nor claim one
