"""A hostile classroom's scenario: every name a person can type holds Markdown images and links, raw
HTML or a bare address, all pointing at 127.0.0.2 (loopback, but not the app), so that a name
rendered as Markdown or HTML shows up as a live link, an image or a request to that origin.

Shared by the AppTest page tests and the browser journey."""

from __future__ import annotations

import base64
import json
import zlib

from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario

OUTSIDE = "127.0.0.2"
IMG = f"![img](http://{OUTSIDE}:9/a.png)"
LINK = f"[click](http://{OUTSIDE}:9/b)"
HTML = f"<img src=http://{OUTSIDE}:9/c.png>"
ANCHOR = f'<a href="http://{OUTSIDE}:9/d">x</a>'
BARE = f"http://{OUTSIDE}:9/e"
OP = f"[op](http://{OUTSIDE}:9/f)"  # an operator no model has: its pin is refused, quoting it
HOSTILE = (IMG, LINK, HTML, ANCHOR, BARE, OP)

#: The cxl preset's devices and its switch, renamed. The GPU (IMG) runs every operator class; the
#: ASIC (ANCHOR) has no matmul kernel, so a pin of a matmul there, or a worker mapped to it, is refused.
RENAME = {"gpu": IMG, "fpga": LINK, "asic": ANCHOR, "dpu": HTML, "cxl-switch": BARE}


def hostile_dict(**training) -> dict:
    """The scenario as a dict (not checked, so a test can make it invalid on purpose)."""
    d = preset("cxl").to_dict()
    for dev in d["devices"]:
        dev["name"] = RENAME.get(dev["name"], dev["name"])
        dev["pool"] = HTML
    for sw in d["switches"]:
        sw["name"] = RENAME.get(sw["name"], sw["name"])
    for link in d["links"]:
        link["a"], link["b"] = RENAME.get(link["a"], link["a"]), RENAME.get(link["b"], link["b"])
    d["name"] = f"**{LINK}**"
    d["description"] = IMG + " " + HTML
    return {"format": "hetlab-scenario/1", "name": f"{IMG} {HTML}", "topology": d, "training": training}


def hostile_scenario(**training) -> Scenario:
    """The hostile scenario, with ``training`` fields (pins, worker_devices, ...) set."""
    return Scenario.from_dict(hostile_dict(**training))


def url_param(d: dict) -> str:
    """A ``?s=`` value for any dict, valid or not (the form Scenario.to_url_param writes)."""
    raw = json.dumps(d, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


#: A pin the Placement page draws (the MLP's first layer on the GPU) and one it refuses (an unknown
#: operator, pinned to the ASIC); both quote hostile names.
GOOD_PIN = {"net_0": IMG}
BAD_PIN = {OP: ANCHOR}
#: Emulation with a worker on the ASIC: the Training page refuses the run (no matmul kernel there).
REFUSED_RUN = {"emulate": True, "workers": 2, "worker_devices": [ANCHOR, IMG]}
