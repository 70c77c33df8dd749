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
