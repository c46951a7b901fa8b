"""Columns held per name (model/per_name.py) come back exactly as they were made."""

import numpy as np
import pytest

from nsys_collective.model.per_name import PerName


@pytest.mark.parametrize("seed", range(30))
def test_a_column_held_per_name_reads_back_as_it_was(seed):
    """Random names (-1 unnamed among them), values that follow from the name or, for some items,
    not (a name with several values), any dtype; no item at all."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400)) if seed else 0
    name = rng.integers(-1, int(rng.integers(1, 40)), n).astype(np.int32 if seed % 2 else np.int64)
    for dtype in (bool, np.uint8, np.int32):
        of_name = rng.integers(-1, 2 if dtype is bool else 200, int(name.max(initial=-1)) + 2).astype(dtype)
        column = of_name[name]
        odd = rng.random(n) < (0.0 if seed % 3 == 0 else 0.05)
        column[odd] = rng.integers(0, 2 if dtype is bool else 200, int(odd.sum())).astype(dtype)
        held = PerName.of(name, column)
        got = held.at(name)
        assert got.dtype == column.dtype and np.array_equal(got, column)
        if seed % 3 == 0:  # values that follow from the name: nothing kept apart
            assert not len(held.odd_rows)
