"""Writing runs to the results store and reading them back (the tables are in store.schema).

Any SQLAlchemy URL works (SQLite and PostgreSQL are tested). Each run keeps the whole `--json`
document of `analyze` (`runs.document`) and the evidence the report draws (`runs.evidence`), so
`load_result` gives back a result that renders exactly like the fresh one; the other tables hold
the same results flat, for SQL: `ranks`, `collectives`, `blame` (one row per cause per
collective), `blocking` (blocking_kernels and blocking_launches, told apart by `cause`),
`contention` and `alignment_hosts`.

A job is stored at most once per set of inputs: (job_path, input_hash, status) is unique, so two
processes writing one store cannot store a job twice; the loser gets `AlreadyStored`.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import URL, Engine, create_engine, delete, event, inspect, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError

from nsys_collective import causes as cause_kinds
from nsys_collective.errors import InputError
from nsys_collective.ingest.sqlite_kind import STORE_APPLICATION_ID, sqlite_kind
from nsys_collective.result import SCHEMA_VERSION, Document, Result, Spread
from nsys_collective.store.schema import (AlignmentHostRow, Base, BlameRow, BlockingRow, CollectiveRow, ContentionRow,
                                          RankTableRow, Run)
from nsys_collective.version import __version__


class AlreadyStored(Exception):
    """`write_run` lost a race: another writer stored this job with these inputs first."""

    def __init__(self, run_id: int | None):
        super().__init__(f"already stored as run {run_id}")
        self.run_id = run_id


def _url(url: str | URL) -> str | URL:
    """A SQLAlchemy URL as given; a bare path is an SQLite file of exactly that name (built, not
    pasted into a URL, so 'we?ird.db' and 'pct%41.db' stay themselves)."""
    return url if isinstance(url, URL) or "://" in url else URL.create("sqlite", database=url)


def _reason(e: BaseException) -> str:
    """The first line of a database error: the driver's own message, without SQLAlchemy's SQL,
    parameters and "Background on this error" lines."""
    text = str(getattr(e, "orig", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _refuse_foreign_sqlite(url: str | URL) -> None:
    """Raise InputError when an SQLite store's file exists and is not a store (nor empty): an
    Nsight Systems export or any other database must never get our tables (checked read-only)."""
    path = store_file(url)
    if path is None or not Path(path).is_file():
        return
    kind = sqlite_kind(path)
    if kind == "nsys":
        raise InputError(f"{path}: an Nsight Systems export, not a results store; name another file with --db")
    if kind == "other":
        raise InputError(f"{path}: an SQLite file with tables that are not a results store's; name another file with --db")
    if kind == "not-sqlite":
        raise InputError(f"{path}: not an SQLite file, so not a results store; name another file with --db")


def _connect(url: str | URL) -> Engine:
    """The engine of a store URL; InputError (one line) for a bad URL, a missing driver or a file
    that is not a store."""
    _refuse_foreign_sqlite(url)
    try:
        return _engine(url)
    except (ArgumentError, NoSuchModuleError, ImportError) as e:
        raise InputError(f"{display_url(url)}: cannot open the results store: {_reason(e)}") from None


def store_file(url: str | URL) -> str | None:
    """The file of an SQLite store (None for a server, memory, or a URL that is not one)."""
    try:
        parsed = make_url(_url(url))
    except ArgumentError:
        return None
    return parsed.database if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") else None


def display_url(url: str | URL) -> str:
    """The store for people: a bare path as given, a URL without its password."""
    if isinstance(url, str) and "://" not in url:
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return str(url)


def _engine(url: str | URL) -> Engine:
    sqlite = make_url(_url(url)).get_backend_name() == "sqlite"
    engine = create_engine(_url(url), connect_args={"timeout": 60} if sqlite else {})
    if engine.dialect.name == "sqlite":
        # Two processes on one file: WAL lets readers run beside the writer, the busy timeout makes
        # a writer wait instead of failing, and writers BEGIN IMMEDIATE, taking the write lock up
        # front (a deferred transaction that reads, then writes, fails at once when another wrote
        # in between). Readers begin deferred and never wait for a writer.
        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection, _record):
            dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" below sends BEGIN
            dbapi_connection.execute("PRAGMA busy_timeout = 60000")
            dbapi_connection.execute("PRAGMA journal_mode = WAL")
            dbapi_connection.execute("PRAGMA foreign_keys = ON")

        @event.listens_for(engine, "begin")
        def _begin(connection):
            connection.exec_driver_sql("BEGIN IMMEDIATE" if connection.get_execution_options().get(_WRITE) else "BEGIN")
    return engine


_WRITE = "collectivetrace_write"


def _writer(engine: Engine) -> Engine:
    """The engine for a transaction that writes (on SQLite: BEGIN IMMEDIATE)."""
    return engine.execution_options(**{_WRITE: True})


def open_store(url: str) -> Engine:
    """The store at `url`, its tables created if absent. Raises `InputError` when it cannot be
    opened (bad URL, missing driver, server unreachable, folder missing)."""
    engine = _connect(url)
    try:
        for attempt in range(3):
            try:
                Base.metadata.create_all(_writer(engine))
                _add_missing_columns(engine)
                break
            except DBAPIError:
                # Another process created the tables between our check and our CREATE: check again.
                if attempt == 2:
                    raise
        if engine.dialect.name == "sqlite":  # says "a results store" in the file's header
            with _writer(engine).begin() as conn:
                conn.exec_driver_sql(f"PRAGMA application_id = {STORE_APPLICATION_ID}")
    except (DBAPIError, ImportError) as e:
        engine.dispose()
        raise InputError(f"{display_url(url)}: cannot open the results store: {_reason(e)}") from None
    return engine


def _add_missing_columns(engine: Engine) -> None:
    """Columns added to the tables since a store was made (all nullable), so older stores keep working."""
    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.key not in present:
                kind = column.type.compile(dialect=engine.dialect)
                with _writer(engine).begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.key} {kind}"))


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def input_hash(folder: Path, files: Sequence[Path]) -> str:
    """sha256 over the inputs' paths relative to the job folder, sizes and content hashes (sorted),
    so the same inputs hash alike wherever their folder lies, and any changed byte makes them new."""
    folder = Path(folder)
    rel = [(Path(f).relative_to(folder).as_posix() if Path(f).is_relative_to(folder) else str(f), Path(f)) for f in files]
    rel.sort()
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(rel)))) as pool:  # hashlib releases the GIL
        digests = list(pool.map(file_sha256, [f for _, f in rel]))
    h = hashlib.sha256()
    for (name, f), digest in zip(rel, digests):
        # surrogateescape: a name that is no UTF-8 hashes as its bytes.
        h.update(f"{name}\0{f.stat().st_size}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def stored_hash(engine: Engine, job_path: str) -> str | None:
    """The input hash of the job's latest successful run, None when it has none."""
    with engine.begin() as conn:
        return conn.scalar(select(Run.input_hash).where(Run.job_path == str(job_path), Run.status == "ok")
                           .order_by(Run.id.desc()).limit(1))


def stored_failure(engine: Engine, job_path: str, input_hash: str) -> str | None:
    """The error of a failed run of the job with these very inputs by this tool version, if any:
    analyzing it again would fail again. Failures of the store or the machine (retryable) are not
    counted: the next batch tries again."""
    with engine.begin() as conn:
        return conn.scalar(select(Run.error).where(
            Run.job_path == str(job_path), Run.input_hash == input_hash, Run.status == "failed",
            Run.tool_version == __version__, Run.retryable.is_not(True)).order_by(Run.id.desc()).limit(1))


def _pick(model, record, **extra) -> dict:
    """A value for every column of `model` from the field of that name of a record of the document
    (None where the record has none, as a launch has no kernel: one executemany needs the same keys
    in every row); lists and nested records stay in the document."""
    out = {c.key: getattr(record, c.key, None) for c in model.__table__.columns}
    out.update(extra)
    return out


def _spread_columns(when: str, spread: Spread | None) -> dict:
    values = (None, None, None) if spread is None else (spread.p50, spread.p95, spread.max)
    return {f"spread_{when}_{q}_ns": v for q, v in zip(("p50", "p95", "max"), values)}


def _summary_columns(doc: Document) -> dict:
    s, a = doc.summary, doc.alignment
    return {
        "ranks": s.ranks, "collectives": s.collectives, "wait_ns": s.wait_ns, "transfer_ns": s.transfer_ns,
        "nccl_time_ns": s.nccl_time_ns, "explained_wait_share": s.explained_wait_share, "avoidable_wait_ns": s.avoidable_wait_ns,
        "top_blocking_kernel": s.top_blocking_kernel, "top_straggler_rank": s.top_straggler_rank,
        "top_cause": cause_kinds.column_text(s.top_cause),
        "alignment_method": a.method, "t_ref_ns": a.t_ref_ns,
        **_spread_columns("before", a.end_spread_ns_before), **_spread_columns("after", a.end_spread_ns_after),
        "violations_before": a.violations_before, "violations_after": a.violations_after,
    }


def _child_rows(run_id: int, doc: Document) -> dict:
    blocking = doc.blocking_kernels + doc.blocking_launches
    return {
        RankTableRow: [_pick(RankTableRow, r, run_id=run_id) for r in doc.ranks],
        CollectiveRow: [_pick(CollectiveRow, c, run_id=run_id, collective=c.id) for c in doc.collectives],
        BlameRow: [_pick(BlameRow, b, run_id=run_id, collective=c.id, position=i)
                   for c in doc.collectives for i, b in enumerate(c.blame)],
        BlockingRow: [_pick(BlockingRow, e, run_id=run_id, position=i) for i, e in enumerate(blocking)],
        ContentionRow: [_pick(ContentionRow, e, run_id=run_id, position=i) for i, e in enumerate(doc.contention)],
        AlignmentHostRow: [_pick(AlignmentHostRow, h, run_id=run_id, position=i) for i, h in enumerate(doc.alignment.hosts)],
    }


def write_run(engine: Engine, job: str | Path, inputs: Sequence, input_hash: str, result_or_error: Result | str,
              *, name: str | None = None, retryable: bool = False) -> int:
    """Stores one run of the job folder `job` (`name`: how to call it, default the folder's name)
    in one transaction: the result with its tables, or a failure (the error text; `retryable`
    when the store or the machine failed, not the inputs). Earlier failed
    runs of the job go: it has a newer record now. Returns the run id; raises `AlreadyStored` when
    another writer stored the job with these inputs first."""
    failed = isinstance(result_or_error, str)
    doc = None if failed else result_or_error.document
    job_path = str(job)
    run = {
        "job": name or Path(job).name, "job_path": job_path, "inputs": len(inputs), "input_hash": input_hash,
        "tool_version": __version__, "schema_version": SCHEMA_VERSION if failed else doc.schema_version,
        "created_at": datetime.datetime.now(datetime.timezone.utc),
        "status": "failed" if failed else "ok", "error": result_or_error if failed else None,
        "retryable": retryable if failed else None,
        "document": None if failed else result_or_error.to_json(indent=None),
        "evidence": None if failed else result_or_error.evidence.to_json(),
        **({} if failed else _summary_columns(doc)),
    }
    try:
        with _writer(engine).begin() as conn:
            conn.execute(delete(Run).where(Run.job_path == job_path, Run.status == "failed"))
            run_id = conn.execute(insert(Run).values(**run).returning(Run.id)).scalar_one()
            if not failed:
                for model, rows in _child_rows(run_id, doc).items():
                    if rows:
                        conn.execute(insert(model), rows)
        return run_id
    except IntegrityError:
        with engine.begin() as conn:
            other = conn.scalar(select(Run.id).where(
                Run.job_path == job_path, Run.input_hash == input_hash, Run.status == run["status"]))
        if other is None:
            raise  # not the race on runs_once_per_inputs: a real error
        raise AlreadyStored(other) from None


def list_runs(engine: Engine) -> list[dict]:
    """Every run, oldest first, without its document."""
    columns = [c for c in Run.__table__.columns if c.key not in ("document", "evidence")]
    with engine.begin() as conn:
        return [dict(row._mapping) for row in conn.execute(select(*columns).order_by(Run.id))]


def load_result(url_or_engine: str | Engine, run_id: int) -> Result:
    """The result stored for run `run_id` (its evidence None for runs stored before it was kept).
    Raises `InputError` when the store has no such run or the run failed (its error is in the
    message)."""
    if not 0 <= run_id < 2**63:  # the database's integers are 64-bit
        raise InputError(f"run {run_id}: not a run id (run ids are 1 to {2**63 - 1})")
    if isinstance(url_or_engine, str):
        path = store_file(url_or_engine)
        if path is not None and not Path(path).is_file():
            raise InputError(f"{path}: no such results store")
    engine = _connect(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    where = display_url(url_or_engine if isinstance(url_or_engine, str) else engine.url)
    try:
        with engine.begin() as conn:
            row = conn.execute(select(Run.status, Run.error, Run.document, Run.evidence, Run.job).where(Run.id == run_id)).first()
    except (DBAPIError, ImportError) as e:  # no store there, no runs table in it, no driver
        raise InputError(f"{where}: cannot read run {run_id}: {_reason(e)}") from None
    finally:
        if engine is not url_or_engine:
            engine.dispose()
    if row is None:
        raise InputError(f"run {run_id}: not in the results store at {where}")
    if row.status != "ok":
        raise InputError(f"run {run_id} ({row.job}) failed, it has no results: {row.error}")
    return Result.from_stored(row.document, row.evidence, source=f"run {run_id}")
