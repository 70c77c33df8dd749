"""What a report says about the view it shows: the settings (the page's controls by their labels, and the
scenario's), the machine with its load now, the lab's version."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from lab.report.html import About
from lab.scenario.document import Scenario
from lab.view.state import VIEW

VERSION = "0.9"
ROOT = Path(__file__).resolve().parents[2]


def version() -> str:
    """The lab's version, with the commit it was built from where the checkout says (read, never run)."""
    try:
        head = (ROOT / ".git" / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = ROOT / ".git" / head[5:]
            head = ref.read_text().strip() if ref.exists() else ""
        return f"{VERSION} ({head[:10]})" if head else VERSION
    except OSError:
        return VERSION


def settings(page: str, values: Mapping[str, Any], sc: Scenario) -> dict[str, Any]:
    """The page's controls by their labels (their values in ``values``, else the defaults), then the scenario's
    name, topology and the training settings that differ from the defaults."""
    out: dict[str, Any] = {}
    for key, c in VIEW.items():
        if c.page == page and not c.prefix and not c.transient:
            out[f"{c.label} ({key})"] = values.get(key, c.setting.default)
    out["Scenario"] = sc.name
    out["Topology"] = f"{sc.topology.name} ({len(sc.topology.devices)} devices)"
    default = type(sc.training)().to_dict()
    for k, v in sc.training.to_dict().items():
        if default.get(k) != v:
            out[f"training.{k}"] = v
    return out


def about(page_title: str, page: str, link: str, values: Mapping[str, Any], sc: Scenario) -> About:
    """The report's facts for ``page`` (a page file's stem) as the view stands."""
    from lab.machine.profile import machine_description

    machine = machine_description()
    machine.pop("hostname", None)  # a report travels; the server's name stays on the server
    return About(page=page_title, link=link, settings=settings(page, values, sc), scenario_json=sc.to_json(),
                 machine=machine, version=version())


__all__ = ["VERSION", "version", "settings", "about"]
