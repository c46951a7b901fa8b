"""The what-if's step table counts each step's GPU busy time from prefix sums over the GPU's busy
blocks (attribution/whatif/replay._busy_before); the reference is the overlap of every block with
every step, summed, which it replaced (O(steps x blocks))."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_collective.attribution.whatif.replay import _busy_before


def busy_in(block_start, block_end, a, b) -> np.ndarray:
    return np.array([np.clip(np.minimum(block_end, y) - np.maximum(block_start, x), 0, None).sum() for x, y in zip(a, b)])


@pytest.mark.parametrize("seed", range(20))
def test_busy_time_in_each_window_is_the_blocks_overlap_with_it(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    gaps, lengths = rng.integers(1, 50, n), rng.integers(0, 50, n)  # empty blocks and touching windows too
    block_start = np.cumsum(gaps + np.r_[0, lengths[:-1]]).astype(np.int64)
    block_end = block_start + lengths
    span = int(block_end[-1]) + 100
    a = rng.integers(-50, span, 40)
    b = np.where(rng.random(40) < 0.2, a - rng.integers(0, 30, 40), a + rng.integers(0, span // 3 + 1, 40))  # some end first
    got = np.maximum(_busy_before(block_start, block_end, b) - _busy_before(block_start, block_end, a), 0)
    assert got.tolist() == busy_in(block_start, block_end, a, b).tolist()
