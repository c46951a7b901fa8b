"""Reader hardening (issue 13): damaged or hostile inputs give dropped rows with one counted warning
per table, or one clean InputError line naming the file; never garbage times, a crash or unbounded
memory. SQLite cases alter a copy of a committed fixture in tmp_path, and both SQLite readers must
agree on it; Kineto cases are written here. Memory cases run the reader in a child process under an
address-space limit (RLIMIT_AS)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
import reference_reader  # tests/: the pure-Python oracle of the native reader
from nsys_collective import _native
from nsys_collective.errors import InputError

SOURCE = FIXTURES / "demo-4rank-2host" / "rep_0.sqlite"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
DROPPED = "rows dropped (NULL, non-integer, negative, reversed or out-of-range times)"
DROPPED_EVENTS = "events dropped (missing, non-numeric, negative, reversed or out-of-range times)"
CENTURY_NS = 100 * 365 * 86_400 * 10**9


def assert_same_raw(a: dict, b: dict) -> None:
    """Two readers' dicts (`_native.read_exports`, `reference_reader.read_raw`) are identical."""
    for key in ("session", "metadata", "system_env", "capture", "strings", "warnings"):
        assert a[key] == b[key], key
    for name, _, _ in _native.table_specs():
        assert list(a[name]) == list(b[name]), name
        for column, values in a[name].items():
            assert values.dtype == np.int64, (name, column)
            np.testing.assert_array_equal(values, b[name][column], err_msg=f"{name}.{column}")


def native(path) -> dict:
    return _native.read_exports([str(path)], 1)[0]


def read_both(path) -> dict:
    export = native(path)
    assert_same_raw(export, reference_reader.read_raw(path))
    return export


def refused(read, path) -> str:
    with pytest.raises(InputError) as info:
        read(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message, message
    return message


@pytest.fixture
def export_copy(tmp_path):
    path = tmp_path / "rank.sqlite"
    shutil.copy(SOURCE, path)
    return path


def alter(path, *statements, loose=()):
    """Runs `statements` on the export at `path`; tables in `loose` first lose their NOT NULL and
    PRIMARY KEY constraints (rebuilt with CREATE TABLE AS), so that any value can be stored."""
    with sqlite3.connect(path) as db:
        for table in loose:
            db.execute(f'CREATE TABLE loose AS SELECT * FROM "{table}"')
            db.execute(f'DROP TABLE "{table}"')
            db.execute(f'ALTER TABLE loose RENAME TO "{table}"')
        for sql in statements:
            db.execute(sql)
    db.close()


# One kernel row each: (start, end) as SQL expressions of the stored values.
BAD_TIMES = {
    "NULL start": ("NULL", "end"),
    "TEXT start": ("'x'", "end"),
    "BLOB start": ("X'00'", "end"),
    "REAL start": ("start + 0.5", "end"),
    "negative start": ("-5", "end"),
    "reversed": ("end + 1", "end"),
    "NULL end": ("start", "NULL"),
    "TEXT end": ("start", "'late'"),
    "beyond int64 once the session start is added": ("9223372036854775000", "9223372036854775800"),
    "two centuries long": ("start", f"start + {2 * CENTURY_NS}"),
}


def test_rows_with_unusable_times_are_dropped_with_one_warning_per_table(export_copy):
    (original,) = _native.read_exports([str(SOURCE)], 1)
    updates = [
        f"UPDATE {KERNEL} SET start = {start}, end = {end} WHERE rowid = {i + 1}" for i, (start, end) in enumerate(BAD_TIMES.values())
    ]
    alter(export_copy, *updates, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 1 WHERE rowid <= 3", loose=[KERNEL])
    export = read_both(export_copy)
    k = export["kernels"]
    assert len(k["start"]) == len(original["kernels"]["start"]) - len(BAD_TIMES)
    assert len(export["runtime"]["start"]) == len(original["runtime"]["start"]) - 3
    assert export["warnings"] == [f"kernels: {len(BAD_TIMES)} {DROPPED}", f"runtime: 3 {DROPPED}"]
    epoch = export["session"]["utc_epoch_ns"]
    for table in ("kernels", "runtime"):
        t = export[table]
        assert np.all(t["start"] >= epoch) and np.all(t["end"] >= t["start"]) and np.all(t["end"] < epoch + CENTURY_NS)
        assert np.all(np.diff(t["start"]) >= 0)


def test_text_or_blob_where_integers_belong_are_missing_values_not_a_crash(export_copy):
    alter(
        export_copy,
        f"UPDATE {KERNEL} SET deviceId = 'gpu0', streamId = X'07', gridX = 'wide' WHERE rowid = 1",
        "UPDATE StringIds SET id = 'x' WHERE id = (SELECT max(id) FROM StringIds)",
        "UPDATE StringIds SET value = X'6e63636c' WHERE id = (SELECT min(id) FROM StringIds)",
        "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'noon'",
        loose=[KERNEL, "StringIds"],
    )
    export = read_both(export_copy)
    k = export["kernels"]
    odd = np.flatnonzero(k["device"] == -1)
    assert len(odd) == 1 and k["stream"][odd[0]] == -1 and k["grid_x"][odd[0]] == -1
    assert export["session"]["utc_epoch_ns"] is None
    assert any("no session start time" in w for w in export["warnings"])


def test_the_time_base_is_told_from_usable_starts_only(export_copy):
    """Exports that do not say whether times are absolute are recognised by a stored start; a
    first start that is text must not decide it (nor crash the read)."""
    alter(
        export_copy,
        "DELETE FROM META_DATA_EXPORT WHERE name = 'EXPORT_PARAM_TIME_NORMALIZE'",
        f"UPDATE {KERNEL} SET start = 'x' WHERE rowid = (SELECT min(rowid) FROM {KERNEL})",
        loose=[KERNEL],
    )
    export = read_both(export_copy)
    assert export["session"]["time_normalized"] is False
    assert export["warnings"] == [f"kernels: 1 {DROPPED}"]


def test_an_export_whose_kernels_all_have_unusable_times_is_refused(export_copy):
    alter(export_copy, f"UPDATE {KERNEL} SET start = 'x'", loose=[KERNEL])
    for read in (native, reference_reader.read_raw):
        message = refused(read, export_copy)
        assert "none of its 258 kernel rows has usable times" in message, message


def test_views_named_like_nsys_tables_are_not_read(export_copy):
    """A view runs arbitrary SQL (an endless recursive one never returns): only stored tables count."""
    alter(export_copy, "DROP TABLE IF EXISTS CUPTI_ACTIVITY_KIND_MEMSET")
    alter(export_copy, "CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS SELECT 1 AS start, 2 AS end, 0 AS deviceId")
    export = read_both(export_copy)
    assert len(export["memset"]["start"]) == 0


# ---------------------------------------------------------------------------------------------
# Kineto (PyTorch profiler) traces

BASE = 1_760_000_000_000_000_000


def kernel(ts, dur, corr=1) -> dict:
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {"device": 0, "stream": 7, "correlation": corr}}
    if ts is None:
        del event["ts"]
    return event


def launch(ts, dur, corr=1) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": 78, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def write_trace(path: Path, events, **top) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE, **top, "traceEvents": events}))
    return path


def kineto(path, **limits) -> dict:
    return _native.read_kineto_traces([str(path)], 1, **limits)[0]


def test_kineto_events_with_unusable_times_are_dropped_and_counted(tmp_path):
    bad = [kernel(1e300, 1.0), kernel("NaN", 1.0), kernel("inf", 1.0), kernel(1000.0, -5.0), kernel(1000.0, 9.2e15),
           kernel(-7.0, 1.0), kernel(None, 1.0), kernel(1000.0, "long"), kernel([1], 1.0)]
    events = [kernel(1000.0, 5.0, 1), kernel(2000.0, 5.0, 2), *bad, launch(999.0, 1.0, 1), launch(1e300, 1.0, 2), launch(5.0, -1.0, 3)]
    export = kineto(write_trace(tmp_path / "t.json", events))
    k = export["kernels"]
    assert k["correlation"].tolist() == [1, 2]
    assert k["start"].tolist() == [BASE + 1_000_000, BASE + 2_000_000]
    assert export["runtime"]["correlation"].tolist() == [1]
    assert export["warnings"] == [f"kernels: {len(bad)} {DROPPED_EVENTS}", f"runtime: 2 {DROPPED_EVENTS}"]


def test_a_base_no_time_fits_after_is_no_base_instead_of_an_overflow(tmp_path):
    """As an nsys session start: an origin a century of times cannot follow is treated as absent."""
    path = write_trace(tmp_path / "t.json", [kernel(1000.0, 5.0), kernel(2000.0, 5.0, 2), launch(999.0, 1.0)], baseTimeNanoseconds=2**63 - 10)
    export = kineto(path)
    assert export["kernels"]["start"].tolist() == [1_000_000, 2_000_000]
    assert export["session"]["utc_epoch_ns"] is None
    assert any("no baseTimeNanoseconds" in w for w in export["warnings"])


def test_a_trace_whose_kernels_all_have_unusable_times_is_refused(tmp_path):
    path = write_trace(tmp_path / "t.json", [kernel(1e300, 1.0), kernel(1000.0, -1.0, 2), launch(999.0, 1.0)])
    message = refused(kineto, path)
    assert "none of its 2 kernel events has usable times" in message, message


def test_literal_nan_is_invalid_json_not_a_crash(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({"traceEvents": [kernel(float("nan"), 1.0)]}))  # Python writes a bare NaN
    assert "invalid JSON" in refused(kineto, path)


def test_max_trace_bytes_is_a_parameter_and_its_error_names_the_flag(tmp_path):
    text = json.dumps({"baseTimeNanoseconds": BASE, "traceEvents": [kernel(1000.0, 5.0), launch(999.0, 1.0)]})
    plain = tmp_path / "t.json"
    plain.write_text(text)
    zipped = tmp_path / "t.json.gz"
    zipped.write_bytes(_gzip(text.encode()))
    for path in (plain, zipped):
        assert len(kineto(path)["kernels"]["start"]) == 1  # the default limit is far above
        message = refused(lambda p: kineto(p, max_trace_bytes=100), path)
        assert "more than 100 bytes" in message and "--max-trace-bytes" in message, message


def _gzip(data: bytes, level: int = 6) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def test_a_gzip_bomb_is_refused_by_its_expansion_ratio(tmp_path):
    """256 MiB of whitespace inside a valid trace, 260 KB compressed (1000-fold): refused early,
    while real traces expand 14 to 18-fold."""
    head = json.dumps({"baseTimeNanoseconds": BASE, "traceEvents": [kernel(1000.0, 5.0), launch(999.0, 1.0)]})[:-1]
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    chunks = [c.compress(head.encode())] + [c.compress(b" " * 2**20) for _ in range(256)] + [c.compress(b"}"), c.flush()]
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(b"".join(chunks))
    message = refused(kineto, path)
    assert "expands more than 200-fold" in message and "--max-gzip-ratio" in message, message
    assert len(kineto(path, max_gzip_ratio=2000)["kernels"]["start"]) == 1


def test_the_limits_are_analyze_options(tmp_path):
    """--max-trace-bytes and --max-gzip-ratio reach the reader: a generated job padded with 20 MiB
    of whitespace (about 1000-fold) is refused by default, in one line naming the flag, and read
    with a higher ratio; a lower byte limit refuses it too."""
    import gzip

    from typer.testing import CliRunner

    from conftest import gen
    from nsys_collective.cli import app

    job = tmp_path / "job"
    gen.generate(job, ranks=2, hosts=1, steps=2, kernels_per_step=12, buckets=2, scenario="balanced", seed=3, format="kineto")
    trace = job / "rank_0.json.gz"
    text = gzip.decompress(trace.read_bytes())
    trace.write_bytes(_gzip(text[:-1] + b" " * 20 * 2**20 + text[-1:]))
    run = CliRunner().invoke
    for args, words in (([], "expands more than 200-fold"), (["--max-trace-bytes", "1000"], "more than 1000 bytes")):
        result = run(app, ["analyze", str(job), "--json", *args])
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and result.stdout == "" and len(lines) == 1, result.stderr
        assert words in lines[0] and ("--max-trace-bytes" if args else "--max-gzip-ratio") in lines[0], lines[0]
    result = run(app, ["analyze", str(job), "--json", "--max-gzip-ratio", "100000"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["ranks"] == 2
    # batch: the job fails with the limit's message by default, and is stored with a higher limit
    # (Dask tasks take the limits to the workers).
    root = tmp_path / "root"
    root.mkdir()
    job.rename(root / "job")
    for executor in ("local", "dask"):
        db = f"sqlite:///{tmp_path / executor}.db"
        failed = run(app, ["batch", str(root), "--db", db, "--executor", executor])
        assert failed.exit_code == 1 and "expands more than 200-fold" in failed.stderr, failed.stderr
        stored = run(app, ["batch", str(root), "--db", db, "--executor", executor, "--retry-failed", "--max-gzip-ratio", "100000"])
        assert stored.exit_code == 0, stored.stderr


# ---------------------------------------------------------------------------------------------
# Memory: a child process under an address-space limit

CHILD = r"""
import json, sys
import numpy  # loaded before the read, as in the CLI: the baseline's address space holds it
from nsys_collective import _native
from nsys_collective.errors import InputError
kind, path = sys.argv[1], sys.argv[2]
read = _native.read_kineto_traces if kind == "kineto" else _native.read_exports
try:
    (export,) = read([path], 1)
except InputError as e:
    print(e, file=sys.stderr)
    sys.exit(2)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"metadata": export["metadata"], "warnings": export["warnings"], "gpus": len(export["gpus"]["id"]),
                  "vm_peak_kb": int(status["VmPeak"].split()[0])}))
"""


def _limit_address_space(limit: int):
    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def run_child(kind: str, path: Path, limit: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_address_space(limit) if limit else None)


@pytest.fixture(scope="module")
def baseline_vm(tmp_path_factory) -> int:
    """Peak address space (bytes) of a child that reads a tiny trace: Python, numpy, the extension."""
    try:
        import resource

        resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, AttributeError, OSError) as e:
        pytest.skip(f"cannot set an address-space limit here ({e})")
    if not Path("/proc/self/status").is_file():
        pytest.skip("no /proc/self/status to read the peak address space from")
    path = write_trace(tmp_path_factory.mktemp("tiny") / "t.json", [kernel(1000.0, 5.0), launch(999.0, 1.0)])
    done = run_child("kineto", path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["vm_peak_kb"] * 1024


# Top-level JSON fragments, written as text (building them as Python objects would cost the test
# itself the memory it checks for).
HUGE = {
    # distributedInfo.pg_config listing 20 million ranks (40 MB of text).
    "pg_config": lambda: '"distributedInfo": {"rank": 1, "world_size": 2, "pg_config": [' + "0, " * 19_999_999 + "0]}",
    # deviceProperties listing two million GPUs (72 MB).
    "deviceProperties": lambda: '"distributedInfo": {"rank": 1}, "deviceProperties": ['
    + '{"id": 0, "name": "g", "numSms": 1}, ' * 1_999_999 + '{"id": 0, "name": "g", "numSms": 1}]',
}


@pytest.mark.parametrize("what", HUGE)
def test_huge_values_the_reader_does_not_need_are_never_built(tmp_path, baseline_vm, what):
    """Before, a trace like these peaked at many GB (every value built as a serde_json tree)."""
    comms = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 77, "tid": 78, "ts": 998.0, "dur": 3.0,
             "args": {"Collective name": "allreduce", "Process Group Ranks": "RANKS"}}
    events = json.dumps([kernel(1000.0, 5.0), launch(999.0, 1.0), comms]).replace('"RANKS"', "[" + "7, " * 2_999_999 + "7]")
    path = tmp_path / "huge.json"
    path.write_text(f'{{"baseTimeNanoseconds": {BASE}, {HUGE[what]()}, "traceEvents": {events}}}')
    # 150 MiB above the baseline: the file is 50-80 MB; a parsed tree of it is many times that.
    done = run_child("kineto", path, limit=baseline_vm + 150 * 2**20)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    meta = dict(result["metadata"])
    assert meta["distributedInfo.rank"] == "1" and "distributedInfo.pg_config" not in meta
    assert result["gpus"] <= 1024


def big_export(path: Path, rows: int) -> Path:
    """A minimal export whose kernel table has `rows` rows of start and end only (46 MB for 3M)."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER)")
        db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1750000000000000000)")
        db.execute(f"CREATE TABLE {KERNEL} (start INTEGER, end INTEGER)")
        db.execute(f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) "
                   f"INSERT INTO {KERNEL} SELECT i * 1000, i * 1000 + 500 FROM n")
    db.close()
    return path


def test_running_out_of_memory_is_a_clean_error_not_an_abort(tmp_path, baseline_vm):
    """5M kernels need about 440 MB of columns; with 150 MiB to spare the read must fail cleanly:
    an InputError line (the CLI's exit status 2), never SIGABRT (exit 134) with a backtrace."""
    path = big_export(tmp_path / "big.sqlite", 5_000_000)
    done = run_child("nsys", path, limit=baseline_vm + path.stat().st_size + 150 * 2**20)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(str(path)) and "not enough memory" in lines[0], done.stderr
    # With room, the same file reads.
    done = run_child("nsys", path)
    assert done.returncode == 0, done.stderr[-2000:]


CLI_BASELINE = r"""
import sys
from nsys_collective import _native, cli
from nsys_collective.cli import analyze
_native.read_exports([sys.argv[1]])
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(int(status["VmPeak"].split()[0]) * 1024)
"""


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path, baseline_vm):
    """The same, through `collectivetrace-nsys analyze`: one `error:` line, exit status 2."""
    path = big_export(tmp_path / "big.sqlite", 5_000_000)
    cli_vm = int(subprocess.run([sys.executable, "-c", CLI_BASELINE, str(SOURCE)], capture_output=True, text=True, check=True).stdout)
    done = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", str(path)], capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_address_space(cli_vm + path.stat().st_size + 150 * 2**20))
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}") and "not enough memory" in lines[0], done.stderr
