"""The training job: its roles, data, one worker rank, compressed sync, emulated devices and links,
resilience, the launcher, reference runs, and the command line.

``python -m lab.train [--scenario FILE] [--workers N] [--steps S] [--optimizer NAME] ...`` starts N
local worker processes itself; under ``torchrun`` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)
the same command is one worker rank. See :mod:`lab.train.cli` for every option.
"""
