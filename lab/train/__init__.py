"""The training job: data, one worker rank, the launcher, and the command line.

``python -m lab.train [--scenario FILE] [--workers N] [--steps S] [--optimizer NAME] ...`` starts N
local worker processes itself; under ``torchrun`` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)
the same command is one worker rank. See :mod:`lab.train.__main__` for every option.
"""
from lab.train import __main__ as cli

__all__ = ["load_scenario", "main"]


def __getattr__(name):
    if name in __all__:

        return getattr(cli, name)
    raise AttributeError(name)
