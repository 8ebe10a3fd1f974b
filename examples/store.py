"""The examples' own record of their ops: SQLite, or PostgreSQL when DATABASE_URL is set.

One row per op: its state (`in-progress` or `done`) and the provider's receipt.
Every write is committed at once: it is what survives the work-horse.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from typing import Any

SCHEMA = "CREATE TABLE IF NOT EXISTS example_jobs (op_id TEXT PRIMARY KEY, state TEXT NOT NULL, receipt TEXT)"
UPSERT = (
    "INSERT INTO example_jobs (op_id, state, receipt) VALUES (?, ?, ?) "
    "ON CONFLICT (op_id) DO UPDATE SET state = excluded.state, receipt = excluded.receipt"
)


def sqlite_path() -> str:
    return os.environ.get("EXAMPLES_DB") or os.path.join(tempfile.gettempdir(), "testbed-examples.sqlite3")


class Jobs:
    def __init__(self) -> None:
        url = os.environ.get("DATABASE_URL")
        if url:
            import psycopg

            self._conn: Any = psycopg.connect(url, autocommit=True)
            self._mark = "%s"
        else:
            self._conn = sqlite3.connect(sqlite_path(), timeout=30, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            # Survives a crash of the process (what the lab does to it), not a power loss.
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._mark = "?"
        self._conn.execute(SCHEMA)

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._mark)

    def get(self, op_id: str) -> tuple[str, str | None] | None:
        row = self._conn.execute(self._sql("SELECT state, receipt FROM example_jobs WHERE op_id = ?"), (op_id,))
        found = row.fetchone()
        return None if found is None else (found[0], found[1])

    def put(self, op_id: str, state: str, receipt: str | None = None) -> None:
        self._conn.execute(self._sql(UPSERT), (op_id, state, receipt))

    def close(self) -> None:
        self._conn.close()
