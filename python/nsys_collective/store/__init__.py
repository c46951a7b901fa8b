"""The results store of `batch` (SQLAlchemy: SQLite by default, PostgreSQL for a team): runs
written from results and read back as results (store.runs), in the tables of store.schema."""

from nsys_collective.store.runs import (AlreadyStored, display_url, input_hash, list_runs, load_result, open_store,
                                        store_file, stored_failure, stored_hash, write_run)

__all__ = ["AlreadyStored", "display_url", "input_hash", "list_runs", "load_result", "open_store", "stored_failure",
           "stored_hash", "store_file", "write_run"]
