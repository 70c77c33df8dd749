"""Runs taken away from the store: their settings, summary and measurements as CSV or JSON files in a folder."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import pandas as pd

from lab.errors import LabError

def safe_filename(name: str, suffix: str, fallback: str = "export") -> str:
    """A file name made only of letters, digits, '.', '_' and '-', that cannot leave its folder."""
    if not suffix.startswith("."):
        suffix = "." + suffix
    name = str(name or "")
    if name.lower().endswith(suffix.lower()):
        name = name[: -len(suffix)]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:100] or fallback
    return stem + suffix


_UNITS = {"loss": "cross-entropy (nats)", "test_acc": "fraction", "bytes_sent": "bytes", "bytes_recv": "bytes",
          "t_compute": "s", "t_comm": "s", "t_compress": "s", "t_idle": "s", "t_emul_compute": "s",
          "t_emul_comm": "s",
          "samples_per_s": "samples/s", "wall": "s since start", "worker": "rank; -1 = whole job"}


class Exports:
    """Exporting runs, part of :class:`lab.store.runs.RunStore`."""

    def export_frame(self, run_ids: Iterable[str]) -> pd.DataFrame:
        ids = list(run_ids)

        m = self.metrics(ids)
        names = {rid: self.get_run(rid)["name"] for rid in ids}
        m.insert(1, "run_name", m.run_id.map(names))
        return m

    def export_csv(self, run_ids: Iterable[str], folder: str | os.PathLike, filename: str = "runs") -> Path:
        """Write the runs' metrics to ``folder/<sanitised filename>.csv``; returns the path."""
        path = self._export_path(folder, filename, ".csv")
        self.export_frame(run_ids).to_csv(path, index=False)
        return path

    def export_json(self, run_ids: Iterable[str], folder: str | os.PathLike, filename: str = "runs") -> Path:
        """Write the runs (settings, status, metrics) to ``folder/<sanitised filename>.json``."""
        path = self._export_path(folder, filename, ".json")
        path.write_text(json.dumps(self.export_dict(run_ids), indent=1))
        return path

    def export_dict(self, run_ids: Iterable[str]) -> dict:
        runs = []
        for rid in run_ids:
            run = self.get_run(rid)
            m = self.metrics(rid).drop(columns=["run_id"])
            run["metrics"] = json.loads(m.to_json(orient="records"))
            runs.append(run)
        return {"format": "hetlab-runs/1", "units": _UNITS, "runs": runs}

    @staticmethod
    def _export_path(folder: str | os.PathLike, filename: str, suffix: str) -> Path:
        base = Path(folder).resolve()
        base.mkdir(parents=True, exist_ok=True)
        path = (base / safe_filename(filename, suffix)).resolve()
        if path.parent != base:  # cannot happen with safe_filename; belt and braces
            raise LabError(f"export file name {filename!r} would leave the export folder", where="export")
        return path

    # ----- checkpoints -------------------------------------------------------------------------
