"""Your own service as the destination: jobs that place orders over httpx with an orders
service on a private PostgreSQL, through the provider's proxy, under the kills, judged from
the orders table, which the test also reads itself."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from labcore.procs import free_port
from tests.support.helpers import assert_left_nothing, run_testbed
from tests.support.postgres import private_postgres
from tests.support.sandboxes import Sandbox

pytestmark = pytest.mark.e2e

OPS = 20  # two faulted ops a cell: 20 / 0 kept, 22 / 0 duplicated
JOBS = "examples.own_service.jobs"


@pytest.fixture
def orders(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Sandbox, str]]:
    """The orders service on a database of its own; DATABASE_URL set for the lab's reader too."""
    with private_postgres() as url:
        monkeypatch.setenv("DATABASE_URL", url)
        port = free_port()
        service = Sandbox([sys.executable, "-m", "examples.own_service.service", "--port", str(port)], port, {})
        try:
            yield service, url
        finally:
            service.stop()


def orders_by_cell(url: str) -> collections.Counter[str]:
    """The orders the table holds, read by the test itself, by cell id (the op ids' ledger)."""
    with psycopg.connect(url) as db:
        references = [row[0] for row in db.execute("SELECT reference FROM orders")]
    return collections.Counter(ref.partition(":")[0].rsplit(".", 1)[1] for ref in references)


def test_the_table_judges_a_keyed_and_a_naive_httpx_job(workdir: Path, orders: tuple[Sandbox, str]) -> None:
    service, url = orders
    handlers = ["--handler", f"{JOBS}:keyed", "--handler", f"{JOBS}:naive"]
    args = [*handlers, "--destination", service.url, "--evidence", f"{JOBS}:effects", "--ops", str(OPS)]
    ran = run_testbed(args, workdir, timeout=600)
    assert ran.code == 1, ran.stderr  # the naive job duplicates: its promise is broken
    lines = ran.stdout.splitlines()
    table = {line.split()[0]: line.split()[1:] for line in lines[lines.index("kill") + 2 :][:2]}
    assert lines[lines.index("kill") + 1].split() == ["strategy", "none", "before-effect", "after-effect"]
    assert table[f"{JOBS}:keyed"] == ["20", "/", "0"] * 3
    assert table[f"{JOBS}:naive"] == ["20", "/", "0", "20", "/", "0", "22", "/", "0", "!"]
    # The counts are the table's: what the test reads there itself.
    assert {row["cell"]: row["effects"] for row in ran.json["rows"]} == dict(orders_by_cell(url))
    keyed = ran.row(f"{JOBS}:keyed", "after-effect")
    assert keyed["duplicateEffects"] == 0 and keyed["requests"] == OPS + 2  # the retries were sent, and deduplicated
    naive = ran.row(f"{JOBS}:naive", "after-effect")
    assert naive["duplicateEffects"] == 2 and naive["requests"] == OPS + 2
    assert_left_nothing(ran)
