"""A rank that fails in a process that lives on (a Ray actor: ``exit_on_error=False``) leaves no process group
behind, so the same process can join the next job's."""
from __future__ import annotations

import torch.distributed as dist

from lab.scenario.document import default_scenario
from lab.train import rank as rank_mod
from tests.conftest import free_port


def test_a_rank_that_fails_in_a_living_process_destroys_its_process_group(monkeypatch, tmp_path):
    for k in ("LAB_ERROR_FILE", "LAB_HEARTBEAT_FILE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    seen = {}

    def broken_setup(self):
        seen["group"] = dist.is_initialized()  # the group was up when the rank failed
        raise RuntimeError("a device fell off the bus")

    monkeypatch.setattr(rank_mod.Trainer, "setup", broken_setup)
    try:
        code = rank_mod.run_rank(default_scenario(), None, store_path=str(tmp_path / "runs.db"), quiet=True,
                                 exit_on_error=False)
        assert code == 1 and seen["group"] is True
        assert not dist.is_initialized()
        # The same process joins a group again, as a reused actor's next job does.
        monkeypatch.setenv("MASTER_PORT", str(free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
        assert dist.get_world_size() == 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
