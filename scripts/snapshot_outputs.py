#!/usr/bin/env python3
"""Every renderer's output for the golden cases, written into one folder, so that a refactoring of
the renderers can be shown to change no byte of them (the golden documents guard only `--json`):

    python scripts/snapshot_outputs.py /tmp/before      # on the code before
    python scripts/snapshot_outputs.py /tmp/after       # on the code after
    diff -r /tmp/before /tmp/after                      # empty: nothing changed

Per case (scripts/golden.py's, the real ones where ../shared/data/real is present): the terminal at
80 and 120 columns and through a pipe, the same run stored and read back at 80 columns, the CSV and
Parquet tables, the Perfetto trace, the store's rows (without the time a run was stored), the run
compared with its stored self; and each case compared with the next (JSON, terminal at 80 and 120).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import golden  # noqa: E402

from nsys_collective.api import compare_runs  # noqa: E402
from nsys_collective.model.job import Filters  # noqa: E402
from nsys_collective.pipeline import analyze  # noqa: E402
from nsys_collective.render import perfetto, terminal  # noqa: E402
from nsys_collective.render.compare import render_comparison  # noqa: E402
from nsys_collective.render.tables import write_tables  # noqa: E402
from nsys_collective.store import open_store  # noqa: E402
from nsys_collective.store.runs import load_result, write_run  # noqa: E402

TABLES = ("runs", "ranks", "collectives", "blame", "blocking", "contention", "alignment_hosts")


def _result(args: list[str]):
    paths, options = golden.split_args(args)
    return analyze(paths, Filters.parse(**options))


def _console(width: int, pipe: bool = False) -> Console:
    return Console(width=width, file=io.StringIO(), highlight=False, soft_wrap=pipe)


def _terminal(result, width: int, pipe: bool = False) -> str:
    out = _console(width, pipe)
    terminal.render(result, out)
    return out.file.getvalue()


def _store_rows(engine) -> dict:
    rows = {}
    with engine.begin() as conn:
        for table in TABLES:
            res = conn.execute(text(f"SELECT * FROM {table}"))
            keys = list(res.keys())
            rows[table] = [{k: str(v) for k, v in zip(keys, row) if k != "created_at"} for row in res]
    return rows


def snapshot(name: str, result, folder: Path):
    folder.mkdir(parents=True)
    for width in (80, 120):
        (folder / f"terminal{width}.txt").write_text(_terminal(result, width))
    (folder / "terminal-pipe.txt").write_text(_terminal(result, terminal.PIPE_WIDTH, pipe=True))
    (folder / "tables").mkdir()
    write_tables(result, folder / "tables")
    perfetto.write_trace(result, folder / "trace.json")
    engine = open_store(str(folder / "store.db"))
    stored = load_result(engine, write_run(engine, name, [], "hash", result))
    (folder / "store-rows.json").write_text(json.dumps(_store_rows(engine), indent=0))
    engine.dispose()
    (folder / "store.db").unlink()
    (folder / "terminal80-stored.txt").write_text(_terminal(stored, 80))
    (folder / "compare-self.json").write_text(json.dumps(compare_runs(result, stored).doc, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write (must not exist)")
    out = parser.parse_args().folder.resolve()
    out.mkdir(parents=True)
    os.chdir(ROOT)  # the golden cases name their inputs from the repository root
    results = {}
    for name, args in golden.available().items():
        results[name] = _result(args)
        snapshot(name, results[name], out / name)
    names = list(results)
    for a, b in zip(names, names[1:]):
        diff = compare_runs(results[a], results[b])
        (out / f"compare-{a}--{b}.json").write_text(json.dumps(diff.doc, indent=1))
        for width in (80, 120):
            console = _console(width)
            render_comparison(diff.doc, console)
            (out / f"compare-{a}--{b}-{width}.txt").write_text(console.file.getvalue())
    print(f"{len(results)} cases written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
