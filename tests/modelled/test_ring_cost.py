"""The ring all-reduce's cost said once: its steps, its share, the exact bytes of the lab's ring, the near-equal
split; checked against the modelled step-by-step schedule and against a brute-force walk of the ring."""
from __future__ import annotations

import pytest

from lab.modelled import collectives
from lab.modelled.collectives.ring import (
    allgather_steps,
    near_equal,
    ring_bytes,
    ring_bytes_per_rank,
    ring_share,
    ring_steps,
    ring_time,
    split,
)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("count", [1, 7, 100, 1001])
def test_the_one_formula_equals_the_step_by_step_schedule_and_a_walk_of_the_ring(n, count):
    s = collectives.build_schedule("ring", n, count * 4, with_state=False)
    assert len(s.steps) == ring_steps(n)
    assert s.sent_bytes()[:n] == ring_bytes_per_rank(count, n)
    sizes = near_equal(count, n)
    walked = [0] * n  # brute force: at every step every rank sends the chunk it holds next
    for r in range(n):
        for step in range(n - 1):
            walked[r] += sizes[(r - step) % n] * 4 + sizes[(r + 1 - step) % n] * 4
    assert walked == ring_bytes_per_rank(count, n)
    if count % n == 0:
        assert all(b == pytest.approx(ring_bytes(count * 4, n)) for b in ring_bytes_per_rank(count, n))


def test_steps_share_time_and_the_split():
    assert [ring_steps(n) for n in (1, 2, 4)] == [0, 2, 6] and [allgather_steps(n) for n in (1, 2, 4)] == [0, 1, 3]
    assert ring_share(4) == 1.5 and ring_share(1) == 0.0
    assert ring_time(4, 1e6, 1e-6, 1e-9) == pytest.approx(6e-6 + 1.5e6 * 1e-9)
    assert near_equal(10, 3) == [4, 3, 3] and split(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split(0, 2) == [(0, 0), (0, 0)] and sum(near_equal(101, 4)) == 101
