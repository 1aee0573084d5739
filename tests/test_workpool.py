"""dgx/workpool.py: tasks handed out in a given order, each start reported (CPU only, spawned processes)."""

from __future__ import annotations

import pytest

from dgx import interrupts, workpool


def _square(x: int) -> int:
    return x * x


def test_tasks_start_in_the_given_order_and_end_with_their_own_index():
    started, done = [], {}
    with interrupts.guard() as state:
        outcome = workpool.run_tasks(
            _square, [(i,) for i in range(6)], jobs=1, state=state, order=[4, 2, 0, 5, 1, 3],
            on_start=started.append, on_done=lambda i, result, error: done.setdefault(i, (result, error)),
        )
    assert not outcome.interrupted
    assert started == [4, 2, 0, 5, 1, 3]  # one worker: handed out (and run) in this order
    assert done == {i: (i * i, None) for i in range(6)}


@pytest.mark.parametrize("order", [[0, 1], [0, 1, 1], [0, 1, 3]])
def test_an_order_that_is_not_a_permutation_is_refused(order):
    with interrupts.guard() as state, pytest.raises(ValueError, match="order: expected a permutation of the 3"):
        workpool.run_tasks(_square, [(1,), (2,), (3,)], jobs=1, state=state, order=order,
                           on_done=lambda *a: None)
