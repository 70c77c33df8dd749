"""The router: st.navigation over pages/, and the warm starter that every job forks from, started
with the app.

The body runs only as the main script, so worker processes started with ``spawn`` that
re-import this file do nothing.
"""

from pathlib import Path

from lab.view.pages import PAGES, available_pages  # noqa: F401 - the list lives with the page models

ROOT = Path(__file__).resolve().parent


def start_warm_starter() -> None:
    """With the app, in the background: the process that forks every job (lab.train.warm), so that
    the first Run does not wait for Python and torch to load. Idempotent and cheap on every rerun."""
    from lab import settings
    from lab.train.warm import shared_starter

    if settings.warm_starts():
        shared_starter().start()


def main() -> None:
    import streamlit as st

    # A local icon: a Material icon as page_icon makes every viewer's browser fetch it from Google's font server.
    st.set_page_config(page_title="Heterogeneous training lab", page_icon=str(ROOT / "assets" / "icon.png"),
                       layout="wide")
    from lab.jobs.access import teacher_token
    from lab.serve import refusal

    # Streamlit listens on every address when none is set: that is a class server too.
    why = refusal(str(st.get_option("server.address") or "0.0.0.0"), teacher_token())
    if why:  # started beyond this machine without a strong teacher's token: nothing of the lab is served
        st.error(f"This lab server is not open: {why}.", icon=":material/lock:")
        st.stop()
    start_warm_starter()
    # On a 1024-pixel projector the sidebar takes 300 px; Streamlit's 5rem side padding of the page would take
    # 160 more, leaving 564 px for the controls. Below 1200 px the padding shrinks to 1.5rem.
    st.html("<style>@media (max-width: 1200px) { [data-testid='stMainBlockContainer'] "
            "{ padding-left: 1.5rem; padding-right: 1.5rem; } }</style>")
    pages = [st.Page(str(ROOT / f), title=t, icon=i, default=(f == "pages/home.py"))
             for f, t, i in available_pages()]
    page = st.navigation(pages)
    page.run()
    from ui.report import report_button

    stems = {t: Path(f).stem for f, t, _ in available_pages()}
    report_button(page.title, stems.get(page.title, "home"))


if __name__ == "__main__":
    main()
