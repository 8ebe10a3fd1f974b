"""The connection a worker keeps open to the run's provider, and its work-horses send on.

Each work-horse is a child forked by this test as RQ's worker forks one
(`workers.worker.Worker` calls `keep_open` before the fork and `horse_ended`
after it); the provider is the run's own process on its unix socket.
"""

import contextlib
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labcore.credentials import bearer
from labcore.endpoints import unix_path, unix_url
from labcore.procs import stop_all
from provider.contract import Contract
from provider.store import LogReader
from testbed.infra.provider_process import ProviderAdmin, ProviderProcess
from tests.support.helpers import horse
from workers import client

pytestmark = pytest.mark.e2e

LEDGER = "conn"
BODY = {"recipient": "a@example.test", "message": "hello"}


@pytest.fixture
def provider(workdir: Path, private_redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderProcess]:
    process = ProviderProcess(workdir, private_redis_url, "conn-test")
    assert unix_path(process.job_url) is not None, "the test needs the provider's unix socket"
    process.launch()
    try:
        process.wait_ready()
        admin = ProviderAdmin(process.url, process.token)
        admin.put_ledger(LEDGER, Contract())
        admin.close()
        # The work-horses' token is read from the environment at import: this process imported it long ago.
        monkeypatch.setattr(client, "_AUTH", "".join(f"{k}: {v}\r\n" for k, v in bearer(process.token).items()))
        yield process
    finally:
        client.drop()
        stop_all(process.release())


def send(base: str, reference: str, expect_inherited: int | None = None) -> Callable[[], None]:
    def work() -> None:
        if expect_inherited is not None:
            assert client._conn is not None and client._conn.sock.fileno() == expect_inherited
        reply = client.send(
            base, LEDGER, {"reference": reference, **BODY}, key=reference, attempt=1, chaos=None, timeout=10
        )
        assert reply.status == 201 and reply.receipt

    return work


def kept(base: str) -> int:
    """As the worker does before a fork: the descriptor of the connection it keeps."""
    client.keep_open(base)
    assert client._conn is not None
    return client._conn.sock.fileno()


def test_work_horses_send_on_the_connection_their_worker_keeps(provider: ProviderProcess) -> None:
    base = provider.job_url
    first = kept(base)
    connection = client._conn
    for n in range(5):
        fd = kept(base)
        assert client._conn is connection and fd == first  # no connect, no accept
        assert horse(send(base, f"op-{n}", expect_inherited=fd)) == 0
        client.horse_ended(clean=True)
    with contextlib.closing(LogReader(provider.db)) as log:
        assert log.effect_count(LEDGER) == 5


def test_a_work_horse_killed_mid_request_leaves_nothing_to_the_next(provider: ProviderProcess) -> None:
    """Half a request on the connection, then a SIGKILL: the worker drops the connection,
    and the next work-horse's request is answered as its own, on a fresh one."""
    base = provider.job_url
    kept(base)

    def half_a_request_then_killed() -> None:
        body = b'{"reference": "op-killed", "recipient": "a@example.test", "message": "hello"}'
        head = client._head(
            "POST", f"/ledgers/{LEDGER}/effects", "localhost", {"Content-Type": "application/json"}, body
        )
        assert client._conn is not None
        client._conn.sock.sendall(head + body[:20])
        os.kill(os.getpid(), signal.SIGKILL)

    assert os.WIFSIGNALED(horse(half_a_request_then_killed))
    client.horse_ended(clean=False)
    assert client._conn is None
    kept(base)
    assert horse(send(base, "op-next")) == 0
    with contextlib.closing(LogReader(provider.db)) as log:
        records = log.records(LEDGER, ["op-killed", "op-next"])
    assert records["op-next"].effects == 1
    assert "op-killed" not in records or records["op-killed"].effects == 0


def test_a_work_horse_that_gives_up_shuts_the_connection_for_its_worker(workdir: Path) -> None:
    """A request that timed out may still be answered: the work-horse shuts the connection
    down, and the worker, which shares it, sees it end and connects afresh."""
    path = workdir / "silent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    base = unix_url(path)
    try:
        kept(base)
        old = client._conn
        assert old is not None
        server, _ = listener.accept()  # never answers
        server.settimeout(5)

        def times_out() -> None:
            try:
                client.send(base, LEDGER, {"reference": "op-1"}, key=None, attempt=1, chaos=None, timeout=0.2)
            except client.Timeout:
                return
            raise AssertionError("the silent server answered")

        assert horse(times_out) == 0  # a job that times out ends cleanly, as far as RQ's worker can tell
        client.horse_ended(clean=True)
        assert client._dropped(old.sock), "the worker's copy of the connection should see it end"
        received = b""
        while chunk := server.recv(65536):
            received += chunk
        assert received.startswith(b"POST /ledgers/conn/effects")  # the request, then the end of the connection
        kept(base)
        assert client._conn is not old
        server.close()
    finally:
        client.drop()
        listener.close()


def test_a_connection_idle_too_long_is_not_used_again(
    provider: ProviderProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider closes idle connections: one the worker kept idle longer than the limit
    is replaced before the next work-horse could send into a connection being closed."""
    base = provider.job_url
    kept(base)
    old = client._conn
    assert old is not None
    client.horse_ended(clean=True)
    monkeypatch.setattr(client, "_IDLE_LIMIT", 0.0)
    kept(base)
    assert client._conn is not old
    assert old.sock.fileno() == -1  # closed
