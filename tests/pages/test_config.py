"""The app's Streamlit settings keep the promises of the README: localhost only, no usage
statistics, small uploads, no tracebacks in the page, and no full GC after every rerun."""

import os
import tomllib

from tests.conftest import ROOT


def test_streamlit_config_keeps_the_promises():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "localhost"
    assert cfg["browser"]["gatherUsageStats"] is False
    assert 1 <= cfg["server"]["maxUploadSize"] <= 10  # MB
    assert cfg["client"]["showErrorDetails"] == "none"
    assert cfg["runner"]["postScriptGC"] is False  # see bench/bench_classroom.py


def test_streamlit_reads_these_settings():
    from streamlit import config

    cwd = os.getcwd()
    try:
        os.chdir(ROOT)  # streamlit reads ./.streamlit/config.toml
        config.get_config_options(force_reparse=True)
        assert config.get_option("runner.postScriptGC") is False
        assert config.get_option("browser.gatherUsageStats") is False
        assert config.get_option("server.address") == "localhost"
    finally:
        os.chdir(cwd)
        config.get_config_options(force_reparse=True)


def test_the_upload_limit_the_readme_and_the_page_state_is_the_one_enforced(tmp_path):
    """One number: Streamlit's upload cap, the lab's own refusal of a larger file, the README and the
    uploader's label."""
    import re

    import pytest

    from lab.errors import LabError
    from lab.scenario.document import MAX_SCENARIO_BYTES, UPLOAD_MB, Scenario, default_scenario

    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["maxUploadSize"] == UPLOAD_MB
    readme = re.search(r"Uploads are limited to (\d+) MB", (ROOT / "README.md").read_text())
    assert readme and int(readme.group(1)) == UPLOAD_MB
    from lab.view.state import VIEW
    assert f"max {UPLOAD_MB} MB" in VIEW["topo_upload"].label
    text = default_scenario().to_json()
    padded = text[:-1] + " " * (MAX_SCENARIO_BYTES - len(text)) + "}"  # exactly at the limit: read
    assert len(padded) == MAX_SCENARIO_BYTES and Scenario.from_json(padded).name == default_scenario().name
    with pytest.raises(LabError, match="at most"):
        Scenario.from_json(padded[:-1] + " }")  # one byte over: refused before parsing
