"""The Compression page under streamlit's AppTest."""

from __future__ import annotations

import pytest
from conftest import app_test, assert_no_exception

from lab.compress import GroupTopK, TopK, real_gradients


@pytest.fixture(scope="module")
def at():
    page = app_test("pages/compression.py", timeout=180)
    assert_no_exception(page)
    return page


def text(at) -> str:
    return " ".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_page_renders_every_section_with_labels(at):
    assert at.title[0].value == "Compression"
    heads = [h.value for h in at.header]
    assert heads[:3] == ["Compressors on one gradient",
                         "Sharing across workers: the seed's sparse ring and its fill-in", "The Cholesky claim (seed A)"]
    assert "Training with compression" in heads and "preset grid" in at.info[0].value
    n = real_gradients("mlp", 1, 64, 0)[0].numel()
    body = text(at)
    assert f"**{n:,} entries**" in body
    assert "measured" in body and "modelled" in body
    # the table: 4 ratios x 3 sparse compressors + fp16 + none, bytes as the payload says
    df = at.dataframe[0].value
    assert len(df) == 14
    gt = df[(df["compressor"] == "Group-TopK (seed D)") & (df["ratio"] == 0.01)].iloc[0]
    assert gt["kept (entries)"] == GroupTopK(0.01, 1024).kept(n) and gt["bytes (B)"] == 24 + 6 * gt["kept (entries)"]
    # the default ring: 4 workers, Group-TopK at the scenario's ratio
    assert f"Each worker kept **{GroupTopK(0.01, 1024).kept(n):,}**" in body
    assert len(at.get("plotly_chart")) >= 6


def test_ring_with_another_compressor_and_apply_to_scenario(at):
    at.slider(key="ring_workers").set_value(3)
    at.selectbox(key="ring_kind").set_value("topk")
    at.number_input(key="ring_ratio").set_value(0.02)
    at.button(key="ring_run").click().run()
    assert_no_exception(at)
    n = real_gradients("mlp", 1, 64, 0)[0].numel()
    assert f"Each worker kept **{TopK(0.02).k_for(n):,}**" in text(at)
    at.button(key="ring_apply").click().run()
    assert_no_exception(at)
    c = at.session_state["scenario"].training.compression
    assert (c.kind, c.ratio, c.group_size) == ("topk", 0.02, 1024)


def test_generated_gradient_and_refused_ratio(at):
    at.radio(key="cp_source").set_value("generated")
    at.number_input(key="cp_n").set_value(20_000)
    at.number_input(key="cp_group").set_value(100)
    at.multiselect(key="cp_ratios").set_value([0.001, 0.1])
    at.button(key="cp_run").click().run()
    assert_no_exception(at)
    assert "**20,000 entries**" in text(at)
    assert any("k = 0" in w.value and "0.001" in w.value for w in at.warning)
    df = at.dataframe[0].value
    assert set(df[df["compressor"] == "Group-TopK (seed D)"]["ratio"]) == {0.1}


@pytest.mark.parametrize("matrix,why", [("weight gradient, transformer q (32x32)", "symmetric"),
                                        ("weight gradient, MLP layer 1 (128x64)", "square")])
def test_cholesky_refuses_weight_gradients(at, matrix, why):
    at.selectbox(key="ch_matrix").set_value(matrix)
    at.button(key="ch_run").click().run()
    assert_no_exception(at)
    infos = [i.value for i in at.info if i.value.startswith("Not applicable")]
    assert infos and why in infos[0]


def test_cholesky_on_a_gram_matrix_and_without_damping(at):
    at.selectbox(key="ch_matrix").set_value("Gram of the digit images (64x64)")
    at.number_input(key="ch_damping").set_value(0.001)
    at.button(key="ch_run").click().run()
    assert_no_exception(at)
    tables = [d.value for d in at.dataframe]
    chol = next(t for t in tables if "sent" in t.columns)
    assert list(chol["bytes (B)"]) == [64 * 64 * 4, 64 * 65 // 2 * 4, 64 * 65 // 2 * 4]
    assert "Adding the factors gives" in text(at)
    at.number_input(key="ch_damping").set_value(0.0)
    at.button(key="ch_run").click().run()
    assert_no_exception(at)
    assert any("positive-definite" in i.value for i in at.info)
