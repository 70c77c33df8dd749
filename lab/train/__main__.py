"""``python -m lab.train`` and ``torchrun -m lab.train``: see :mod:`lab.train.cli`."""
from lab.settings import one_thread_per_pool

one_thread_per_pool()  # before torch and numpy load: a launcher forks its ranks, and a rank runs on one core

from lab.train.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
