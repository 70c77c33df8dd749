"""Page plumbing, the only streamlit-aware code outside pages/, one idea per module:

* :mod:`ui.session`: the session's one Scenario and every page control's value;
* :mod:`ui.identity`: who this browser is (the student's cookie, the teacher);
* :mod:`ui.lessons`: lesson mode and the active lesson's panel;
* :mod:`ui.widgets`: a field's or a control's widget, a box per device, and a form, from its table;
* :mod:`ui.show`: a page model's sections, badges, captions, table columns, and ``guarded`` (a message, never a
  traceback);
* :mod:`ui.runs`: a submit queued once, predictions of stored runs;
* :mod:`ui.live`: a live part of a page, which refreshes itself and backs off when its render is slow;
* :mod:`ui.link`: the link that reproduces a view;
* :mod:`ui.page`: the sidebar every page shows and the link that reproduces the view;
* :mod:`ui.text`: ``plain``, the one way user text reaches anything rendered as Markdown, as text.

Pages use the names below as ``ui.<name>``."""

from ui.identity import client, job_manager, owner, teacher
from ui.lessons import LESSONS, hidden, lesson_mode, open_lesson, set_lesson_mode
from ui.live import live
from ui.link import view_link_params
from ui.page import scenario_sidebar
from ui.runs import placement_rows, predicted_runs, prediction_beside_measured, submit_book, submit_once
from ui.session import remember, scenario, set_scenario, set_view, view_value
from ui.show import badge, caption, column_config, guarded, show, show_all
from ui.text import plain
from ui.widgets import control, form, per_device, setting, settings_form

__all__ = ["client", "job_manager", "owner", "teacher", "LESSONS", "hidden", "lesson_mode", "open_lesson", "set_lesson_mode",
           "live", "scenario_sidebar", "view_link_params", "placement_rows", "predicted_runs", "prediction_beside_measured",
           "submit_book", "submit_once", "remember", "scenario", "set_scenario", "set_view", "view_value", "badge",
           "caption", "column_config", "guarded", "show", "show_all", "plain", "control", "form", "per_device", "setting",
           "settings_form"]
