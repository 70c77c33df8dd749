"""Browser journey of a class on a Ray cluster: the app started with LAB_RAY_ADDRESS pointing at Ray's multi-node
test cluster; a student runs a job from the Training page, a second student beside her cannot stop it, and the
Jobs page lists which node ran which rank."""

import re

import pytest

from lab.store.runs import RunStore
from tests.conftest import BROWSER_ARGS, CHROMIUM, WAIT_MS, lab_server, ray_test_cluster, settle
from tests.journey import heading, new_page, no_error_boxes, type_number, wait_for_run

pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("ray")]  # one Ray cluster at a time


def test_a_run_from_the_training_page_runs_on_the_cluster_and_the_jobs_page_says_where(browser, tmp_path,
                                                                                        monkeypatch):
    with ray_test_cluster(dict(num_cpus=1), dict(num_cpus=1)) as cluster:
        nodes = cluster.nodes_added
        monkeypatch.setenv("LAB_RAY_ADDRESS", cluster.address)
        with lab_server(tmp_path) as base:
            # A browser of its own, closed with the journey: the session's shared one came out of this journey
            # several times slower for the journeys after it.
            own = browser.browser_type.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            alice, bob = new_page(own), new_page(own)
            try:
                alice.goto(base + "/training")
                settle(alice)
                type_number(alice, "Steps (count)", 100000)
                alice.get_by_role("button", name="Run", exact=True).click()
                wait_for_run(alice)
                store = RunStore(tmp_path / "runs.db")
                rid = store.list_runs().id.iloc[0]
                alice.get_by_text(re.compile(r"running: step \d+ of 100000")).first.wait_for(timeout=180_000)

                # Bob sees the class's jobs read-only: no Stop for Alice's job.
                bob.goto(base + "/jobs")
                # The page's first run in this server beside a job on both cores and a Ray cluster can take longer
                # than a click waits: wait for the page itself first.
                heading(bob, "Jobs", timeout_ms=120_000)
                bob.get_by_text("Show the whole class's jobs (read-only)").click(timeout=WAIT_MS)
                settle(bob)
                heading(bob, f"Job {rid}")
                assert bob.get_by_role("button", name="Stop", exact=True).count() == 0

                alice.goto(base + "/jobs")
                heading(alice, "Jobs", timeout_ms=120_000)
                heading(alice, f"Job {rid}")
                alice.get_by_text("Which node of the Ray cluster ran which rank").wait_for(timeout=WAIT_MS)
                ran_on = {n["node"] for n in store.job_records.last_event(rid, "started")["detail"]["nodes"]}
                assert ran_on <= {n.node_id for n in nodes} and len(ran_on) == 2  # one CPU a node: two nodes
                alice.get_by_role("button", name="Stop", exact=True).click()
                alice.locator("text=stopped >> visible=true").first.wait_for(timeout=WAIT_MS)  # not the table's hidden cell
                assert store.status(rid) == "stopped"
                no_error_boxes(alice)
                no_error_boxes(bob)
            finally:
                alice.context.close()
                bob.context.close()
                own.close()
