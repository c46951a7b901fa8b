"""Reports -> SQLite through `nsys export`, with a real nsys (fetched from Debian) and a fake."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sqlite3
from pathlib import Path

import pytest

from conftest import REAL, fake_nsys, no_real_data, nsys_calls as calls
from nsys_collective.ingest import nsys_export
from nsys_collective.errors import InputError, NsysExportError
from nsys_collective.ingest.nsys_export import export_path_for, export_reports, find_nsys

REPO = Path(__file__).resolve().parents[2]
# A whole export for the fake nsys to write: what it writes is checked before it is cached.
EXPORT = REPO / "fixtures" / "demo-4rank-2host" / "rep_0.sqlite"
WRITE_EXPORT = f'cp "{EXPORT}" "$out"\n'
QDREP = REAL / "reports" / "brentgg-hac-report1.qdrep"

# What nsys 2023.4.4 prints (on stderr, exit status 1) for a report from a newer nsys.
NEWER_MESSAGE = (
    "Exportation error: Report was created in Nsight Systems version (2099.4.4.54-234433681190v0), "
    "newer than your current version (2023.4.4.54-234433681190v0).\n"
    "Please update your Nsight Systems to the latest version to view this report."
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kernel_rows(export: Path) -> int:
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# The real nsys


@pytest.fixture(scope="session")
def real_nsys() -> Path:
    """nsys 2023.4.4 from scripts/fetch_nsys.py, cached in its default folder across runs."""
    spec = importlib.util.spec_from_file_location("fetch_nsys", REPO / "scripts" / "fetch_nsys.py")
    fetch_nsys = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_nsys)
    try:
        return fetch_nsys.fetch()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"no real nsys (scripts/fetch_nsys.py failed: {exc})")


def test_fetch_nsys_sizes_come_from_the_package_index():
    """The one line fetch_nsys prints gives the download and unpacked sizes apt's index states
    (measured here: 190 MB and 713 MB, where the README once said 190 MB in all)."""
    spec = importlib.util.spec_from_file_location("fetch_nsys", REPO / "scripts" / "fetch_nsys.py")
    fetch_nsys = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_nsys)
    show = ("Package: nsight-systems-target\nVersion: 1\nInstalled-Size: 600000\nSize: 100000000\n\n"
            "Package: nsight-systems\nVersion: 1\nInstalled-Size: 100000\nSize: 90000000\n\n"
            "Package: nsight-systems\nVersion: 0\nInstalled-Size: 1\nSize: 1\n")
    assert fetch_nsys._sizes(show) == (190_000_000, 700_000 * 1024)
    assert fetch_nsys._mb(712_687_000) == "713 MB"


@pytest.fixture(scope="session")
def qdrep() -> Path:
    if not QDREP.is_file():
        pytest.skip(no_real_data(QDREP))
    return QDREP


def test_real_nsys_exports_qdrep(qdrep, real_nsys, tmp_path, monkeypatch):
    before = sha256(qdrep)
    cache = tmp_path / "cache"

    [export] = export_reports([qdrep], nsys=real_nsys, cache_dir=cache)

    assert export.parent == cache
    assert export.read_bytes()[:16] == b"SQLite format 3\0"
    assert kernel_rows(export) == 20
    assert sha256(qdrep) == before, "the report must never be modified"
    assert [p.name for p in cache.iterdir()] == [export.name], "no temporary file left"

    # A second call reuses the export: nsys must not run again.
    mtime = export.stat().st_mtime_ns

    def no_run(*args, **kwargs):
        raise AssertionError(f"nsys ran again: {args}")

    monkeypatch.setattr(nsys_export.subprocess, "run", no_run)
    assert export_reports([qdrep], nsys=real_nsys, cache_dir=cache) == [export]
    assert export.stat().st_mtime_ns == mtime


def test_real_nsys_newer_report(qdrep, real_nsys, tmp_path):
    # A copy of the report whose version tag claims a future nsys: the real refusal message.
    data = qdrep.read_bytes()
    assert data.startswith(b"NVIDIA Tegra Profiler Report 1.\n")
    newer = tmp_path / "newer.qdrep"
    newer.write_bytes(data.replace(b"Report 1.\n", b"Report 2099@1@1@1-1v0.\n", 1))
    cache = tmp_path / "cache"

    with pytest.raises(NsysExportError) as err:
        export_reports([newer], nsys=real_nsys, cache_dir=cache)
    message = str(err.value)
    assert message.startswith(
        f"{newer}: made by a newer Nsight Systems (2099.1.1.1) than nsys 2023.4.4")
    assert "\n" not in message
    assert not any(cache.iterdir())


@pytest.mark.parametrize("content, says", [
    (b"", "Cannot read from stream."),
    (b"hello world\n" * 10, "Version tag is not found in the stream."),
], ids=["empty", "text"])
def test_real_nsys_garbage_report(real_nsys, tmp_path, content, says):
    garbage = tmp_path / "x.nsys-rep"
    garbage.write_bytes(content)
    cache = tmp_path / "cache"

    with pytest.raises(NsysExportError) as err:
        export_reports([garbage], nsys=real_nsys, cache_dir=cache)
    assert str(err.value) == (f"{garbage}: nsys export failed: {says} "
                              "(not an Nsight Systems report, or a damaged one)")
    assert not any(cache.iterdir())


# ---------------------------------------------------------------------------------------------
# A fake nsys: a shell script that logs each call and then does what the test says.


@pytest.fixture
def report(tmp_path) -> Path:
    path = tmp_path / "in" / "rank0.nsys-rep"
    path.parent.mkdir()
    path.write_bytes(b"not really a report")
    return path


@pytest.mark.parametrize("offers", [True, False])
def test_payload_blobs_are_asked_for_where_nsys_offers_them(tmp_path, report, offers, monkeypatch):
    """NCCL 2.19+ writes message sizes only in NVTX payloads: the export keeps them as blobs
    where this nsys's `export --help` lists --include-blobs, and is made as before where not."""
    help_text = ("--include-blobs=<true|false>  Include NVTX extended payload blobs" if offers
                 else "--type=<sqlite|hdf|text|json>  Export format")
    monkeypatch.setenv("COLLECTIVETRACE_CACHE", str(tmp_path / "cache"))
    nsys = fake_nsys(tmp_path, WRITE_EXPORT, help_text=help_text)
    export_reports([report], nsys=nsys)
    [args] = (tmp_path / "nsys-args.log").read_text().splitlines()
    assert args.startswith("export --type sqlite")
    assert ("--include-blobs true" in args) == offers


def test_fake_success_goes_to_the_cache_never_beside_the_report(tmp_path, report, monkeypatch):
    monkeypatch.setenv("COLLECTIVETRACE_CACHE", str(tmp_path / "cache"))
    nsys = fake_nsys(tmp_path, """\
        printf 'Processing 10 events: [==50%%   ]\\rProcessing 10 events: [100%%]\\n' >&2
        """ + WRITE_EXPORT)

    [export] = export_reports([report], nsys=nsys)

    assert export.parent == tmp_path / "cache" and export.name.startswith("rank0-")  # the report's folder is writable
    assert sha256(export) == sha256(EXPORT)
    assert sorted(p.name for p in report.parent.iterdir()) == ["rank0.nsys-rep"]
    assert report.read_bytes() == b"not really a report"
    # nsys wrote to a temporary .sqlite name in the cache, not to the export itself.
    [call] = calls(tmp_path)
    tmp_out = Path(call.split()[0])
    assert tmp_out.parent == export.parent and tmp_out.suffix == ".sqlite" and tmp_out != export


def test_fake_newer_version(tmp_path, report):
    action = f"printf half > \"$out\"\ncat >&2 <<'EOF'\n{NEWER_MESSAGE}\nEOF\nexit 1\n"
    nsys = fake_nsys(tmp_path, action)
    cache = tmp_path / "cache"

    with pytest.raises(NsysExportError) as err:
        export_reports([report], nsys=nsys, cache_dir=cache)

    assert isinstance(err.value, InputError)
    assert str(err.value) == (
        f"{report}: made by a newer Nsight Systems (2099.4.4.54) than nsys 2023.4.4.54; "
        "export it with that version (nsys export --type sqlite) and pass the .sqlite")
    assert not any(cache.iterdir()), "no half-written export may be left behind"


def test_fake_other_failure_leaves_nothing(tmp_path, report):
    nsys = fake_nsys(tmp_path, """\
        printf 'half an export' > "$out"
        printf 'Processing 10 events: [==50%%   ]\\r' >&2
        echo 'Exportation error: Something went wrong inside.' >&2
        echo 'Please try again.' >&2
        exit 1
        """)

    with pytest.raises(NsysExportError) as err:
        export_reports([report], nsys=nsys, cache_dir=tmp_path / "cache")

    assert str(err.value) == f"{report}: nsys export failed: Something went wrong inside."
    assert [p.name for p in report.parent.iterdir()] == ["rank0.nsys-rep"]
    assert not any((tmp_path / "cache").iterdir())


def test_fake_failure_without_message(tmp_path, report):
    nsys = fake_nsys(tmp_path, "exit 3\n")
    with pytest.raises(NsysExportError, match=r"rank0.nsys-rep: .* with exit status 3"):
        export_reports([report], nsys=nsys, cache_dir=tmp_path / "cache")


def test_fake_success_without_file(tmp_path, report):
    nsys = fake_nsys(tmp_path, "exit 0\n")
    with pytest.raises(NsysExportError, match="reported success but wrote no file"):
        export_reports([report], nsys=nsys, cache_dir=tmp_path / "cache")


def test_cached_export_is_reused_until_the_report_changes(tmp_path, report):
    nsys = fake_nsys(tmp_path, WRITE_EXPORT)
    cache = tmp_path / "cache"
    [export] = export_reports([report], nsys=nsys, cache_dir=cache)
    assert len(calls(tmp_path)) == 1

    # The same report: reused, nsys not even looked for.
    assert export_reports([report], nsys=tmp_path / "no-such-nsys", cache_dir=cache) == [export]
    assert len(calls(tmp_path)) == 1

    # A cached export damaged since (truncated): exported again, in its place.
    export.write_bytes(export.read_bytes()[:5000])
    assert export_reports([report], nsys=nsys, cache_dir=cache) == [export]
    assert sha256(export) == sha256(EXPORT) and len(calls(tmp_path)) == 2

    # The report written again, even with its old mtime: a new cache entry, exported again.
    mtime = report.stat().st_mtime_ns
    report.write_bytes(b"another report")
    os.utime(report, ns=(mtime, mtime))
    [again] = export_reports([report], nsys=nsys, cache_dir=cache)
    assert again != export and len(calls(tmp_path)) == 3


def test_many_reports_in_parallel_keep_order(tmp_path):
    nsys = fake_nsys(tmp_path, 'sleep 0.2\n' + WRITE_EXPORT)
    reports = []
    for i in range(6):
        path = tmp_path / "in" / f"rank{i}.nsys-rep"
        path.parent.mkdir(exist_ok=True)
        path.write_text(str(i))
        reports.append(path)
    cache = tmp_path / "cache"

    exports = export_reports(reports + [reports[0]], nsys=nsys, cache_dir=cache, jobs=3)

    assert exports == [export_path_for(r, cache) for r in reports + [reports[0]]]
    assert all(sha256(e) == sha256(EXPORT) for e in exports)
    assert len(set(exports)) == 6 and len(calls(tmp_path)) == 6  # the repeated report is exported once


def test_first_failure_stops_the_rest(tmp_path):
    nsys = fake_nsys(tmp_path, """\
        case "$report" in *bad*) echo 'Exportation error: bad one.' >&2; exit 1;; esac
        """ + WRITE_EXPORT)
    folder = tmp_path / "in"
    folder.mkdir()
    good, bad = folder / "good.nsys-rep", folder / "bad.nsys-rep"
    good.write_text("g")
    bad.write_text("b")

    cache = tmp_path / "cache"
    with pytest.raises(NsysExportError, match=r"bad.nsys-rep: nsys export failed: bad one\.$"):
        export_reports([good, bad], nsys=nsys, jobs=1, cache_dir=cache)
    assert sorted(p.name for p in folder.iterdir()) == ["bad.nsys-rep", "good.nsys-rep"]
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


def test_missing_report(tmp_path):
    with pytest.raises(NsysExportError, match="no such report"):
        export_reports([tmp_path / "absent.nsys-rep"], nsys=fake_nsys(tmp_path, "exit 0\n"))


@pytest.mark.skipif(importlib.util.find_spec("rich") is None, reason="rich not installed")
def test_progress_bar(tmp_path, report, capsys):
    nsys = fake_nsys(tmp_path, WRITE_EXPORT)
    [export] = export_reports([report], nsys=nsys, progress=True, cache_dir=tmp_path / "cache")
    assert sha256(export) == sha256(EXPORT)
    assert capsys.readouterr().out == ""  # the bar goes to stderr only


# ---------------------------------------------------------------------------------------------
# Finding nsys, choosing where exports go


def test_find_nsys_explicit(tmp_path):
    nsys = fake_nsys(tmp_path, "exit 0\n")
    assert find_nsys(nsys) == nsys
    assert find_nsys(str(nsys)) == nsys


def test_find_nsys_missing_explicit(tmp_path):
    with pytest.raises(NsysExportError, match="nsys not found"):
        find_nsys(tmp_path / "nowhere" / "nsys")
    not_executable = tmp_path / "nsys"
    not_executable.write_text("#!/bin/sh\n")
    not_executable.chmod(0o644)
    if os.access(not_executable, os.X_OK):
        pytest.skip("this user can execute any file")
    with pytest.raises(NsysExportError, match="nsys not found"):
        find_nsys(not_executable)


def test_find_nsys_on_path(tmp_path, monkeypatch):
    nsys = fake_nsys(tmp_path, "exit 0\n")
    monkeypatch.setenv("PATH", str(nsys.parent))
    assert find_nsys() == nsys
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(NsysExportError) as err:
        find_nsys()
    assert str(err.value) == ("nsys not found: install Nsight Systems or pass --nsys PATH "
                              "(or export the reports to .sqlite yourself)")


def test_export_path_for(tmp_path, monkeypatch):
    a = tmp_path / "a" / "r.nsys-rep"
    b = tmp_path / "b" / "r.nsys-rep"
    for path in (a, b):
        path.parent.mkdir()
        path.write_text("x")
    cache = tmp_path / "cache"

    in_cache_a, in_cache_b = export_path_for(a, cache), export_path_for(b, cache)
    assert in_cache_a.parent == cache and in_cache_a.suffix == ".sqlite"
    assert in_cache_a.name.startswith("r-") and in_cache_a != in_cache_b
    assert export_path_for(a, cache) == in_cache_a  # stable

    # Never beside the report, writable folder or not: the default cache, $COLLECTIVETRACE_CACHE.
    monkeypatch.setenv("COLLECTIVETRACE_CACHE", str(tmp_path / "env-cache"))
    assert export_path_for(a) == tmp_path / "env-cache" / in_cache_a.name

    # A hard link is the same report (one inode): one cache entry.
    os.link(a, tmp_path / "a" / "r2.nsys-rep")
    key = lambda path: export_path_for(path, cache).name.split("-", 1)[1]  # noqa: E731
    assert key(tmp_path / "a" / "r2.nsys-rep") == key(a)



def test_analyze_a_report_end_to_end(qdrep, real_nsys, tmp_path):
    """`analyze report.qdrep --nsys ...`: exported by the real nsys, read, one rank of 20 kernels;
    a newer report through the CLI is one line and exit status 2."""
    import json

    from typer.testing import CliRunner

    from nsys_collective.cli import app

    cache = tmp_path / "cache"
    result = CliRunner().invoke(app, ["analyze", str(qdrep), "--nsys", str(real_nsys), "--cache-dir", str(cache), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["inputs"][0]["path"] == str(qdrep) and doc["inputs"][0]["nsys_version"].startswith("2023.4.4")
    assert [r["kernels"] for r in doc["ranks"]] == [20]

    newer = tmp_path / "newer.qdrep"
    newer.write_bytes(qdrep.read_bytes().replace(b"Report 1.\n", b"Report 2099@1@1@1-1v0.\n", 1))
    result = CliRunner().invoke(app, ["analyze", str(newer), "--nsys", str(real_nsys), "--cache-dir", str(cache)])
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "newer Nsight Systems" in result.stderr
