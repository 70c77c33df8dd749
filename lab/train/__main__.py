"""``python -m lab.train`` and ``torchrun -m lab.train``: see :mod:`lab.train.cli`."""
from lab.train.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
