"""A job analyzed with its exports read on demand (inputs.ExportSource): the same results as with
every export in memory, while only a few exports are ever alive at once."""

from __future__ import annotations

import gc
import json
import weakref

import pytest

from conftest import FIXTURES, gen
from nsys_collective.analysis import analyze_exports
from nsys_collective.inputs import ExportSource, discover, read_inputs
from nsys_collective.json_output import document


class CountingSource(ExportSource):
    """Records how many exports are alive (anywhere in the process) after each read."""

    def __init__(self, paths, keep):
        super().__init__(paths, keep)
        self.alive: list[weakref.ref] = []
        self.most_alive = 0

    def __getitem__(self, index):
        export = super().__getitem__(index)
        self.alive.append(weakref.ref(export))
        gc.collect()
        self.most_alive = max(self.most_alive, len({id(r()) for r in self.alive if r() is not None}))
        return export


def both_ways(folder, keep=2):
    paths = discover([folder])
    in_memory = analyze_exports(read_inputs(paths), [str(p) for p in paths])
    source = CountingSource(paths, keep)
    on_demand = analyze_exports(source, [str(p) for p in paths])
    as_text = [str(p) for p in paths]
    return json.dumps(document(in_memory, as_text)), json.dumps(document(on_demand, as_text)), source


@pytest.mark.parametrize("scenario, extra", [("mixed", {}), ("contention", {}), ("extra_kernel", {"format": "kineto"})])
def test_on_demand_equals_in_memory_with_few_exports_alive(tmp_path, scenario, extra):
    gen.generate(tmp_path, ranks=8, hosts=2, steps=4, kernels_per_step=28, buckets=2, scenario=scenario, seed=41, **extra)
    whole, lazy, source = both_ways(tmp_path)
    assert lazy == whole
    # One export in the analysis's hands plus the `keep` the source holds, whatever the rank count.
    assert source.most_alive <= source.keep + 1
    assert source.reads >= len(source)  # each read at least once; some again, on demand


def test_on_demand_on_the_committed_demo():
    whole, lazy, source = both_ways(FIXTURES / "demo-4rank-2host", keep=1)
    assert lazy == whole and source.most_alive <= 2
