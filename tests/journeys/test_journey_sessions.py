"""Browser journey: three people on one server. Student A starts a run on the Training page and
reloads it: still A's, with Stop. Student B's Training and Jobs pages do not show it as B's, B has no
Stop or Release for it, and with the class switch B reads it (read-only); a teacher's token in a link
makes nobody the teacher; the teacher signs in on the Jobs page, stays the teacher across a reload,
and stops A's job, and the store says the teacher did. On Compare, B sees none of A's runs by default
and B's Delete of A's run is refused with A's run intact. Once nothing is active, B's Jobs page stops
polling."""

import os
import re
import signal

import pytest

from lab.view import jobs as job_views
from lab.view.live import MAX_INTERVAL_S
from lab.jobs.access import TEACHER
from lab.store.runs import RunStore
from lab.train.launcher_record import processes_of
from tests.conftest import WAIT_MS, lab_server, settle
from tests.journey import (
    heading,
    nav,
    new_page,
    no_error_boxes,
    selected,
    slide,
    type_number,
    wait_for_run,
)

pytestmark = pytest.mark.timeout(600)
TOKEN = "journey-teacher-7f3a"
CLASS_SWITCH = "Show the whole class's jobs (read-only)"

def job_choice(pg) -> str:
    """The text of the Jobs page's job picker (id · status · owner · name)."""
    return selected(pg, "Job")


def buttons(pg, name: str) -> int:
    return pg.get_by_role("button", name=name, exact=True).count()


def count_frames(pg) -> None:
    """Count the messages the server pushes to this page (a polling fragment sends some every second)."""
    pg.frames_in = 0

    def on_ws(ws):
        def got(_payload):
            pg.frames_in += 1
        ws.on("framereceived", got)

    pg.on("websocket", on_ws)


def polls(pg) -> bool:
    """Whether the server pushes this page a message within the longest interval a live part backs off to
    (a busy server renders slowly, so the page refreshes less often than once a second, never less than this)."""
    before = pg.frames_in
    for _ in range(int((MAX_INTERVAL_S + 5) * 2)):
        pg.wait_for_timeout(500)
        if pg.frames_in > before:
            return True
    return False


def test_students_see_their_own_jobs_and_the_teacher_manages_all(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)  # lab_server passes the environment on
    store = RunStore(tmp_path / "runs.db")
    with lab_server(tmp_path) as base:
        a = new_page(browser)
        b = new_page(browser)  # its own browser context: another person
        t = new_page(browser)
        for pg in (a, b):
            count_frames(pg)
        try:
            # A starts a run: 1 worker, small batch (the teacher stops it in a moment)
            a.goto(base + "/training")
            settle(a)
            heading(a, "Training")
            slide(a, "Workers (processes)", -1)
            type_number(a, "Steps (count)", 100_000)
            type_number(a, "Batch per worker (samples)", 16)
            a.get_by_role("button", name="Run", exact=True).click()
            wait_for_run(a)
            runs = store.list_runs()
            assert len(runs) == 1, runs[["id", "status"]]
            rid, owner_a = runs.id.iloc[0], runs.owner.iloc[0]
            assert owner_a
            heading(a, f"Run {rid}")
            a.get_by_text("running: step").first.wait_for(timeout=180_000)
            # A reloads: the same student (the browser's cookie), the run and its Stop are still A's
            a.reload()
            settle(a)
            heading(a, f"Run {rid}")
            a.get_by_role("button", name="Stop", exact=True).wait_for(timeout=WAIT_MS)
            a2 = a.context.new_page()  # a second tab of A's browser: A again
            a2.goto(base + "/jobs")
            settle(a2)
            heading(a2, f"Job {rid}")
            assert "· you ·" in job_choice(a2) and buttons(a2, "Stop") == 1
            a2.close()

            # B's Training page: not B's run
            b.goto(base + "/training")
            settle(b)
            b.get_by_text("No runs yet").wait_for(timeout=WAIT_MS)
            assert b.get_by_role("heading", name=f"Run {rid}").count() == 0
            assert buttons(b, "Stop") == 0

            # B's Jobs page: nothing of B's; with the class switch, A's job to read, no buttons for it
            b.goto(base + "/jobs")
            settle(b)
            b.get_by_text("No jobs of yours yet").wait_for(timeout=WAIT_MS)
            assert buttons(b, "Stop") == 0 and buttons(b, "Release") == 0
            b.get_by_text(CLASS_SWITCH).click()
            settle(b)
            heading(b, f"Job {rid}")
            choice = job_choice(b)
            assert rid in choice and "another session" in choice and "you" not in choice.split(" · "), choice
            assert b.get_by_text("Read-only: this job belongs to another session").count() == 1
            assert buttons(b, "Stop") == 0 and buttons(b, "Release") == 0
            assert store.status(rid) == "running"

            # A's own Jobs page (the same session: through the sidebar) has the buttons for it
            nav(a, "Jobs")
            heading(a, f"Job {rid}")
            assert "· you ·" in job_choice(a)
            assert buttons(a, "Stop") == 1 and buttons(a, "Release") == 1
            assert polls(a)  # its job is active: the page polls the store

            # a token in a link is not taken (it would stay in the history), and leaves the address
            t.goto(base + f"/jobs?teacher={TOKEN}")
            settle(t)
            t.get_by_text("A teacher's token in a link is not accepted").wait_for(timeout=WAIT_MS)
            assert TOKEN not in t.url and t.get_by_text("Teacher: you see").count() == 0
            # the teacher signs in on the Jobs page, and stays the teacher across a reload
            t.get_by_text("Teacher", exact=True).first.click()
            t.locator("input[type='password']").first.fill("not-the-token")
            t.get_by_role("button", name="Sign in as the teacher").click()
            settle(t)
            t.get_by_text("That is not the teacher's token.").wait_for(timeout=WAIT_MS)
            t.wait_for_timeout(1500)  # a wrong token makes this browser wait a second before its next try
            t.locator("input[type='password']").first.fill(TOKEN)
            t.get_by_role("button", name="Sign in as the teacher").click()
            settle(t)
            t.get_by_text("Teacher: you see and manage every session's jobs.").wait_for(timeout=WAIT_MS)
            t.reload()
            settle(t)
            t.get_by_text("Teacher: you see and manage every session's jobs.").wait_for(timeout=WAIT_MS)
            assert TOKEN not in t.url
            heading(t, f"Job {rid}")
            assert f"session {owner_a}" in job_choice(t)
            stop = t.get_by_role("button", name="Stop", exact=True)
            assert stop.count() == 1 and stop.is_enabled()
            stop.click()
            settle(t)
            t.get_by_text("Stopped by: the teacher").wait_for(timeout=WAIT_MS)
            run = store.get_run(rid)
            assert run["status"] == "stopped" and run["info"]["stopped_by"] == TEACHER
            assert store.job_records.events(rid).set_index("event").detail["stop"]["by"] == TEACHER

            # B on Compare: none of A's runs by default; with the class's, A's run to read, not to delete
            b.goto(base + "/compare")
            settle(b)
            b.get_by_text("No stored runs of yours yet").wait_for(timeout=WAIT_MS)
            b.get_by_text("Include the whole class's runs (read-only)").click()
            settle(b)
            b.get_by_text("Pick one or more runs.").wait_for(timeout=WAIT_MS)
            b.get_by_role("combobox", name="Runs").first.click()
            b.get_by_role("option", name=re.compile(re.escape(rid))).click()
            b.keyboard.press("Escape")
            settle(b)
            b.get_by_text("Delete runs").click()
            b.get_by_text("Yes, delete 1 run(s)").click()
            settle(b)
            b.get_by_role("button", name="Delete the chosen runs").click()
            settle(b)
            b.get_by_text("another session's job").first.wait_for(timeout=WAIT_MS)
            assert store.get_run(rid)["status"] == "stopped"  # A's run is intact
            b.goto(base + "/jobs")  # opened by its address: B's own last view, the class switch still on
            settle(b)
            heading(b, f"Job {rid}")
            assert b.get_by_text("Teacher:").count() == 0
            b.get_by_text(CLASS_SWITCH).click()
            settle(b)
            b.get_by_text("No jobs of yours yet").wait_for(timeout=WAIT_MS)

            # nothing active: the page no longer polls the store
            b.get_by_text(CLASS_SWITCH).click()
            settle(b)
            assert "stopped" in job_choice(b)
            # what decides the polling (a full run when the last active job ended turns it off): nothing active
            assert not job_views.has_active(store, None, everyone=True)
            for pg in (a, b, t):
                no_error_boxes(pg)
        finally:
            for pg in (a, b, t):
                pg.context.close()
            for r in store.list_runs().id:  # the job's processes run in their own session
                for pid in processes_of(r):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
