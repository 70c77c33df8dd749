"""The Home page's model: what the lab is, a line for each page, the lessons, and (for the teacher) the class's
progress through them."""
from __future__ import annotations

from pathlib import Path

from lab.store.runs import run_store
from lab.view.lessons import Lesson, class_view, load_lessons
from lab.view.section import Section
from lab.view.pages import available_pages  # noqa: F401 - the pages Home links to

INTRO = ("Draw a cluster of host CPUs, GPUs, FPGAs (chips whose circuits are configured for a task), ASICs (chips "
         "built for one task), DPUs (network cards with processors of their own) and NPUs (neural-network "
         "accelerators) joined by CXL (a link through which one device reads another's memory directly), PCIe and "
         "Ethernet; see which layer the cost model puts on which device and why (the placement); step through what an "
         "all-reduce (every device ends with the sum of every device's gradient) really sends; and run small real "
         "multi-process trainings (torch.distributed over gloo, PyTorch's library of collectives for CPUs, on this "
         "machine's CPU) to compare Adam, AdaBelief and Max-AdaBelief (Adam variants that scale each step by how far "
         "the gradient strays from its average) with and without gradient compression (Group-TopK sends only the "
         "largest values of each group of the gradient).\n\n"
         "Every figure says what it is: {measured} on this machine, {modelled} by the lab's cost model from the "
         "topology's numbers, or {emulated} (a device or link made slower by waiting). The device and link numbers "
         "are illustrative assumptions taken from public datasheets; edit them. Every term the pages use is "
         "explained in the glossary at the end of **About the designs**.")

#: A line per page: short, so that a page link does not wrap on a projector 1024 pixels wide.
DESCRIPTIONS = {
    "Topology": "build the cluster; routes; CXL versus PCIe",
    "Placement": "which operator runs where, and why; load balancing",
    "All-reduce": "all-reduce step by step, modelled and measured",
    "Optimisers": "Adam, AdaBelief, Max-AdaBelief on 2-D functions",
    "Training": "real multi-process runs, live",
    "Compare": "runs side by side, with their noise",
    "Compression": "Group-TopK, sparse rings, the Cholesky claim",
    "Jobs": "job lifecycle, faults and recovery",
    "Class": "the teacher's class: join code, names, a lesson handed out",
    "Fidelity": "prediction beside measurement",
    "About the designs": "the four designs, their claims, where each is tested",
}

LESSONS_INTRO = ("Short lessons, one for every claim of the designs and every page. Each opens its page with its "
                 "scenario (in the page link, so the address bar can be shared) and lesson mode on, which hides the "
                 "advanced controls; switch it off in the sidebar. Your ticks and answers are kept for you, on every "
                 "page and after a reload.")
CLASS_STEPS_CAPTION = "Per step: how many students ticked it, tried its question and answered it right."
CLASS_STUDENTS_CAPTION = ("Per student (numbered in the order they started; no ids): the steps ticked in each "
                          "lesson.")
# The step table in about 650 pixels (a 1024-pixel window with the sidebar open): a step's text and its lesson's
# title wrap onto three lines in narrow columns, so the counts beside them stay on screen, under short headings.
CLASS_STEPS_COLUMNS = {
    "lesson": {"kind": "text", "width": 140},
    "step": {"kind": "number", "width": 45},
    "what": {"kind": "text", "width": 270},
    "ticked (students)": {"kind": "number", "label": "ticked", "width": 65, "help": "students who ticked the step"},
    "tried the question": {"kind": "number", "label": "tried", "width": 65,
                           "help": "students who tried the step's question (empty: the step asks none)"},
    "answered right": {"kind": "number", "label": "right", "width": 65,
                       "help": "students who answered the step's question right"},
}
CLASS_STEPS_ROW_PX = 72  # three lines of text: Streamlit wraps a cell's text only in rows taller than 64 pixels
CLASS_STUDENTS_COLUMNS = {"student": {"kind": "text", "pinned": True}}  # stays in view as the lessons scroll by


def page_links(pages) -> list[tuple[str, str, str]]:
    """(file, label, icon) of every page but Home, from the app's ``(file, title, icon)`` list."""
    return [(file, f"**{title}**: {DESCRIPTIONS.get(title, '')}", icon) for file, title, icon in pages
            if title != "Home"]


def lessons(folder: Path, pages) -> list[tuple[Lesson, str, list[str], str | None]]:
    """Every lesson in ``folder``: (the lesson, what it shows, its steps, why it cannot open yet or None)."""
    files = {f for f, _, _ in pages}
    return [(x, x.text(folder), [f"{i + 1}. {step}" for i, step in enumerate(x.steps)],
             None if x.page in files else f"{x.page} is not part of this build yet") for x in load_lessons(folder)]


def class_progress(folder: Path, store=None) -> tuple[list[dict], list[dict]]:
    """The teacher's view of the class: per step of every lesson, and per student (numbered, no ids)."""
    return class_view((store if store is not None else run_store()).lessons.lesson_progress(), load_lessons(folder))


def class_sections(folder: Path, store=None) -> list[Section]:
    """:func:`class_progress` as the page shows it (and a report keeps it): each table with its caption."""
    steps, students = class_progress(folder, store)
    return [Section("home_class_steps", table=steps, columns=CLASS_STEPS_COLUMNS, row_height=CLASS_STEPS_ROW_PX,
                    missing="", caption=CLASS_STEPS_CAPTION),
            Section("home_class_students", table=students, columns=CLASS_STUDENTS_COLUMNS,
                    caption=CLASS_STUDENTS_CAPTION)]


def parts(teacher: bool) -> tuple[str, ...]:
    """The Home page's parts under its introduction, in order. A teacher's class progress comes first: below the
    twenty lesson cards nobody finds it on a projector."""
    return ("class", "pages", "lessons") if teacher else ("pages", "lessons")


__all__ = ["available_pages", "INTRO", "DESCRIPTIONS", "LESSONS_INTRO", "CLASS_STEPS_CAPTION", "CLASS_STUDENTS_CAPTION",
           "CLASS_STEPS_COLUMNS", "CLASS_STEPS_ROW_PX", "CLASS_STUDENTS_COLUMNS", "page_links", "lessons",
           "class_progress", "class_sections", "parts"]
