"""Lesson mode (the sidebar switch, or ?lesson=1 in the link) hides each page's advanced controls
and shows them again when switched off (AppTest)."""

from __future__ import annotations

import pytest

from tests.conftest import app_test, assert_no_exception

# page -> keys of advanced widgets it draws outside lesson mode (and hides in it)
ADVANCED = {
    "pages/allreduce.py": {"ar_top", "ar_iters", "ar_work"},
    "pages/training.py": {"tr_impl", "tr_seed", "tr_split", "tr_alpha", "tr_exchange", "tr_lr_scaling", "tr_fused",
                          "tr_cmp_group", "tr_cmp_sharing", "tr_cmp_ef", "tr_repeats"},
    "pages/placement.py": {"pl_noise", "pl_seed", "pl_tol", "pl_patience", "pl_rounds"},
    "pages/optimisers.py": {"pg_seed", "pg_own_start", "pg_x0", "pg_y0"},
    "pages/compression.py": {"cp_group", "cp_seed", "ch_damping"},
    "pages/fidelity.py": {"fid_quick", "fid_steps"},
}
WIDGETS = ("number_input", "selectbox", "checkbox", "radio", "toggle", "slider", "multiselect", "select_slider")


def widget_keys(at) -> set[str]:
    return {w.key for kind in WIDGETS for w in at.get(kind) if getattr(w, "key", None)}


@pytest.mark.parametrize("page", sorted(ADVANCED))
def test_lesson_mode_hides_the_advanced_controls(page, lab_db, spawns):
    at = app_test(page, timeout=120, query={"lesson": "1"})
    assert_no_exception(at)
    assert at.toggle(key="lesson_mode_toggle").value is True
    hidden = ADVANCED[page] & widget_keys(at)
    assert not hidden, f"shown in lesson mode: {hidden}"
    at.toggle(key="lesson_mode_toggle").set_value(False).run()
    assert_no_exception(at)
    missing = ADVANCED[page] - widget_keys(at)
    assert not missing, f"not shown outside lesson mode: {missing}"
