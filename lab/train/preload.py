"""What every rank runs, loaded once into a process that starts ranks from itself: the warm starter, a launcher
that forks its ranks, a warm rank actor on a Ray cluster."""
from __future__ import annotations

from lab.errors import LabError
from lab.settings import one_thread_per_pool


def load_rank_code() -> None:
    """Load what every rank runs, once in this process, so that the ranks forked from it start with it: torch
    (one thread per pool, set before it loads), torch._dynamo (which torch.optim imports on its first
    optimiser, 1.2 s of CPU), the ranks' code, the first checkpoint's serialiser and the digits."""
    one_thread_per_pool()
    import torch
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.utils.serialization  # noqa: F401

    import lab.train.rank  # noqa: F401
    from lab.train import data

    torch.set_num_threads(1)  # also when torch loaded before this, with the pools of its own
    try:
        data.load_dataset("digits")  # cached in this process
    except LabError:
        pass


__all__ = ["load_rank_code"]
