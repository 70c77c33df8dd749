"""The lab's pages: the router (app.py) lists them, Home links to them, About and the report's command line name
them. A page is listed once its file exists."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (file, title, icon).
PAGES = [
    ("pages/home.py", "Home", ":material/home:"),
    ("pages/topology.py", "Topology", ":material/hub:"),
    ("pages/placement.py", "Placement", ":material/account_tree:"),
    ("pages/allreduce.py", "All-reduce", ":material/sync:"),
    ("pages/optimisers.py", "Optimisers", ":material/trending_down:"),
    ("pages/training.py", "Training", ":material/model_training:"),
    ("pages/compare.py", "Compare", ":material/compare_arrows:"),
    ("pages/compression.py", "Compression", ":material/compress:"),
    ("pages/jobs.py", "Jobs", ":material/work_history:"),
    ("pages/classroom.py", "Class", ":material/groups:"),
    ("pages/fidelity.py", "Fidelity", ":material/query_stats:"),
    ("pages/about.py", "About the designs", ":material/menu_book:"),
]

#: page file -> its title.
TITLES = {f: t for f, t, _ in PAGES}


def available_pages() -> list[tuple[str, str, str]]:
    return [p for p in PAGES if (ROOT / p[0]).exists()]


__all__ = ["PAGES", "ROOT", "TITLES", "available_pages"]
