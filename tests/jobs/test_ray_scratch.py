"""A Ray rank's scratch folder: removed when its rank ends, and when a rank is killed (it cannot clean up), by the
next rank on its node, which removes the folders of ranks whose process is gone and no other."""
from __future__ import annotations

import os
import subprocess
import sys

from lab.train.ray_ranks import RANK_SCRATCH, SCRATCH_OWNER, sweep_rank_scratch


def test_the_folder_of_a_rank_whose_process_is_gone_is_swept_and_no_other(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folders = {}
    for name, owner in (("gone", str(gone.pid)), ("alive", str(os.getpid())), ("unnamed", None), ("garbled", "x")):
        d = tmp_path / f"{RANK_SCRATCH}20261130-000000-abcdef-{name}"
        d.mkdir()
        (d / "rank.hb").write_text("{}")
        if owner is not None:
            (d / SCRATCH_OWNER).write_text(owner)
        folders[name] = d
    other = tmp_path / "lab-job-20261130-000000-abcdef"  # a launcher's folder: not a rank's, never swept here
    other.mkdir()
    (other / SCRATCH_OWNER).write_text(str(gone.pid))
    assert sweep_rank_scratch(tmp_path) == 1
    assert not folders["gone"].exists()
    assert all(folders[k].exists() for k in ("alive", "unnamed", "garbled")) and other.exists()
    assert sweep_rank_scratch(tmp_path) == 0
