"""A per-item column that is a function of the item's name, held per name instead of per item.

A rank's trace holds its millions of GPU items until the analysis ends; their short names follow
from their full names: a few hundred names, so a table per name id and one `take` of the name
column whenever the column is read (a fraction of a millisecond per rank at 1.9M kernels, read a
few times per rank), where a column held per item took 4 bytes an item for every rank (7.7 MB at
1.9M kernels). What is read many times per rank stays a column (model/trace.py's GpuNames.kind,
HostCalls.kind). The items whose value is not their name's
(a name with several short names: none in the captures seen) are kept apart, so that any column
comes back exactly as it was made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PerName:
    """One column of a table of items (one value per item), held by the items' name ids."""

    # The value of each name id's items, -1 (unnamed) in the last slot.
    of_name: np.ndarray
    # The items whose value is not their name's: their rows and their values.
    odd_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    odd_values: np.ndarray | None = None

    @classmethod
    def of(cls, name: np.ndarray, column: np.ndarray) -> PerName:
        """`column` (one value per item) by the items' `name` ids (from -1)."""
        of_name = np.zeros(int(name.max(initial=-1)) + 2, column.dtype)
        of_name[name] = column  # a name with several values keeps one of them; the rest are odd
        odd = np.flatnonzero(of_name.take(name) != column)
        return cls(of_name, odd, column[odd])

    def at(self, name: np.ndarray) -> np.ndarray:
        """The column of the items named `name` (the ids it was made from)."""
        out = self.of_name.take(name)  # -1 takes the last slot
        if len(self.odd_rows):
            out[self.odd_rows] = self.odd_values
        return out
