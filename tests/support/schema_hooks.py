"""Schemathesis hooks for tests/e2e/test_provider_schema.py (loaded by `st` through SCHEMATHESIS_HOOKS).

One extra check: a request the provider refuses (any 4xx but 402, a stored decision) leaves its effect log
as it was. The log's size is read right before and right after each call (the run uses one worker).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Any

import schemathesis

DB_ENV = "TESTBED_SCHEMA_DB"
TABLES = ("effects", "idempotency_keys")

_before: dict[str, tuple[int, ...]] = {}
_after: dict[str, tuple[int, ...]] = {}


def log_size() -> tuple[int, ...]:
    with contextlib.closing(sqlite3.connect(f"file:{os.environ[DB_ENV]}?mode=ro", uri=True)) as conn:
        return tuple(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    _before[case.id] = log_size()


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    _after[case.id] = log_size()


@schemathesis.check
def rejection_leaves_the_log_unchanged(ctx: Any, response: Any, case: Any) -> bool | None:
    before, after = _before.pop(case.id, None), _after.pop(case.id, None)
    refused = 400 <= response.status_code < 500 and response.status_code != 402
    if refused and before is not None and before != after:
        raise AssertionError(f"a {response.status_code} changed the log {TABLES}: {before} -> {after}")
    return None
