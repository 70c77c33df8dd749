"""Browser journey of a class, three people in their own browsers: the teacher signs in, opens a class on the Class
page and reads out its code; two students join with the code and their names; the teacher sees both names (as
text) and hands out a lesson; the students' open pages go to it without a click, in lesson mode with no switch to
leave it; a student's choice made after it is kept by a reload (the lesson does not open over it), another
student's view untouched; a second private window of a student is a visitor who cannot queue; one person's third window
through a proxy from the same address waits its turn to join; the teacher releases the lesson and removes a
student."""

import pytest
from playwright.sync_api import expect

from lab.store.runs import RunStore
from tests.conftest import WAIT_MS, lab_server, settle
from tests.journey import nav, new_page, no_error_boxes

pytestmark = pytest.mark.timeout(420)
TOKEN = "class-teacher-5d2b-Q"


def join(pg, base: str, code: str, name: str) -> None:
    pg.goto(base + "/classroom")
    settle(pg)
    pg.get_by_role("textbox", name="Join code").fill(code)
    pg.get_by_role("textbox", name="Your name").fill(name)
    pg.get_by_role("button", name="Join", exact=True).click()
    settle(pg)
    pg.get_by_text(f"You are in the class as {name}.").wait_for(timeout=WAIT_MS)


def test_a_teacher_hands_a_lesson_to_two_students_who_joined_by_code_and_name(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    monkeypatch.setenv("LAB_NEW_PER_CLIENT", "2")
    monkeypatch.setenv("LAB_NEW_EVERY_S", "600")
    with lab_server(tmp_path) as base:
        teacher, ada, bob, window = (new_page(browser) for _ in range(4))
        proxied = [new_page(browser, browser.new_context(viewport={"width": 1400, "height": 900},
                                                         extra_http_headers={"X-Forwarded-For": "10.9.9.9"}))
                   for _ in range(3)]
        try:
            teacher.goto(base + "/jobs")
            settle(teacher)
            teacher.get_by_text("Teacher", exact=True).first.click()
            teacher.locator("input[type='password']").first.fill(TOKEN)
            teacher.get_by_role("button", name="Sign in as the teacher").click()
            settle(teacher)
            teacher.get_by_text("Teacher: you see and manage every session's jobs.").wait_for(timeout=WAIT_MS)
            nav(teacher, "Class")
            teacher.get_by_role("button", name="Open a class").click()
            settle(teacher)
            store = RunStore(tmp_path / "runs.db")
            code = store.class_book.class_state().code
            assert " ".join(code) in teacher.locator("[data-testid='stMetric']").first.inner_text()

            join(ada, base, code.lower(), "Ada <b>L</b>")
            join(bob, base, code, "Bob")
            teacher.reload()
            settle(teacher)
            table = teacher.locator("[data-testid='stDataFrame']").first
            table.wait_for(timeout=WAIT_MS)
            assert teacher.locator("b", has_text="L").count() == 0  # a name is text, never markup
            assert set(store.class_book.seats().values()) == {"Ada <b>L</b>", "Bob"}

            teacher.get_by_role("button", name="Hand this lesson out").click()
            settle(teacher)
            lesson = store.class_book.class_state().lesson
            assert lesson
            for pg in (ada, bob):  # the hand-out reaches the students' open pages without a click
                pg.locator(".st-key-lesson_panel").wait_for(timeout=WAIT_MS)
            lesson_path = ada.evaluate("window.location.pathname")
            # Ada changes a choice on another page and reloads: her view stays, the lesson does not open over it
            nav(ada, "Placement")
            steps = ada.get_by_role("spinbutton", name="Steps", exact=True)
            steps.fill("30")
            steps.press("Enter")
            settle(ada)
            ada.reload()
            settle(ada)
            steps.wait_for(timeout=WAIT_MS)
            assert ada.evaluate("window.location.pathname").endswith("/placement")
            assert steps.input_value() == "30"
            bob.reload()  # Bob's own view: still the lesson's page, and his Placement steps untouched by Ada's
            settle(bob)
            bob.locator(".st-key-lesson_panel").wait_for(timeout=WAIT_MS)
            assert bob.evaluate("window.location.pathname") == lesson_path
            nav(bob, "Placement")
            # Read once the Placement page has replaced the lesson's (a loaded server draws it after the click); a
            # value Ada's change reached would stay and fail this
            bob.wait_for_function("() => window.location.pathname.endsWith('/placement')", timeout=WAIT_MS)
            expect(bob.get_by_role("spinbutton", name="Steps", exact=True)).to_have_value("40", timeout=WAIT_MS)
            toggle = ada.locator("[data-testid='stSidebar'] input[type='checkbox']").first
            assert toggle.is_checked() and toggle.is_disabled()  # no switch to leave the teacher's lesson
            assert ada.get_by_role("button", name="End the lesson").count() == 0
            no_error_boxes(ada)

            window.goto(base + "/classroom")  # another private window: a visitor, not a student
            settle(window)
            window.get_by_role("textbox", name="Join code").wait_for(timeout=WAIT_MS)
            no_error_boxes(window)

            # one person's three private windows reaching the server through a proxy here, from one address: a page
            # load costs the address nothing; the two first to join take its burst of 2, the third waits its turn
            for pg in proxied:
                pg.goto(base + "/classroom")
                settle(pg)
                pg.get_by_role("textbox", name="Join code").wait_for(timeout=WAIT_MS)
            for pg, name in zip(proxied[:2], ("First window", "Second window")):
                pg.get_by_role("textbox", name="Join code").fill(code)
                pg.get_by_role("textbox", name="Your name").fill(name)
                pg.get_by_role("button", name="Join", exact=True).click()
                pg.locator(".st-key-lesson_panel").wait_for(timeout=WAIT_MS)  # a lesson is handed out: it opens
            third = proxied[2]
            third.get_by_role("textbox", name="Join code").fill(code)
            third.get_by_role("textbox", name="Your name").fill("Third window")
            third.get_by_role("button", name="Join", exact=True).click()
            settle(third)
            third.get_by_text("this address made several new students just now").wait_for(timeout=WAIT_MS)
            no_error_boxes(third)
            assert {"First window", "Second window"} <= set(store.class_book.seats().values())
            assert "Third window" not in store.class_book.seats().values()

            teacher.get_by_role("button", name="Release the class from the lesson").click()
            settle(teacher)
            assert store.class_book.class_state().lesson is None
            ada.reload()
            settle(ada)
            assert ada.locator("[data-testid='stSidebar'] input[type='checkbox']").first.is_enabled()
            no_error_boxes(teacher)
        finally:
            for pg in (teacher, ada, bob, window, *proxied):
                pg.context.close()
