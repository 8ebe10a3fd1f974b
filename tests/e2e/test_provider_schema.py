"""The provider's API holds its own schema: schemathesis against a real provider process, and the bad inputs
that once broke it (a malformed chaos header that left its key in flight for good, an infinite clock step,
a 100 MB body, a key of a million characters)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from labcore.credentials import TOKEN_ENV
from tests.support import schema_hooks
from tests.support.standalone import Standalone

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BODY = {"reference": "op-1", "recipient": "a@example.test", "message": "hello"}
SEED, EXAMPLES = 1, 25  # about 1,000 requests (its stateful phase adds to them), 17 s on a 2-core VM

# The token comes from the environment (`${...}`), not from schemathesis's command line.
# 501 (a ledger without lookup by reference) and 503 (an armed request the lab abandons) are
# documented answers of the simulated contract, not failures; 500 is never one.
# "Valid data accepted" means an answer of the contract: unknown ledger, in flight, withdrawn, conflict, declined.
CONFIG = f"""
headers = {{ Authorization = "Bearer ${{{TOKEN_ENV}}}" }}

[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "501", "503"]

[checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "402", "404", "409", "410", "422", "501"]
"""


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    running = Standalone(tmp_path_factory.mktemp("provider") / "log.sqlite3").start()
    yield running
    assert running.stop() in (0, -15)  # ends by its SIGTERM (provider.server)


def log_size(provider: Standalone) -> tuple[int, ...]:
    return tuple(provider.rows(t) for t in schema_hooks.TABLES)


def test_schemathesis_finds_no_server_error_no_schema_violation_and_no_writing_rejection(
    provider: Standalone, tmp_path: Path
) -> None:
    """Every check schemathesis has, and one of ours (tests/support/schema_hooks.py): a refused request
    leaves the effect log as it was."""
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or pytest.fail("schemathesis is not installed")
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    argv = [st, "--config-file", str(config), "run", f"{provider.url}/openapi.json", "--checks", "all"]
    argv += ["--seed", str(SEED), "--max-examples", str(EXAMPLES), "--workers", "1", "--no-color"]
    argv += ["--generation-database", "none", "--report", "ndjson", "--report-dir", str(tmp_path)]
    # A user's job's routes take a token the lab signs: any other is refused (403), valid as it may look.
    argv += ["--exclude-path-regex", "^/(s|d)/"]
    env = {**os.environ, TOKEN_ENV: provider.token, "SCHEMATHESIS_HOOKS": "tests.support.schema_hooks"}
    env |= {
        schema_hooks.DB_ENV: str(provider.db),
        "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    }
    ran = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and "generated" in ran.stdout
    statuses = _statuses(tmp_path)
    assert 500 not in statuses
    # The run reached the API, not only its guard: sends applied, and refusals of every kind.
    assert {200, 201, 400, 401, 404} <= set(statuses), statuses
    assert log_size(provider)[0] > 0


def test_without_the_token_every_route_but_health_is_refused_and_changes_nothing(provider: Standalone) -> None:
    with provider.client() as http:
        http.put("/ledgers/locked", json={})
        http.post("/ledgers/locked/effects", json=BODY, headers={"Idempotency-Key": "locked-1"})
    before = log_size(provider)
    with httpx.Client(base_url=provider.url, trust_env=False, timeout=10) as anonymous:
        for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": provider.token}):
            answers = [
                anonymous.put("/ledgers/locked", json={"dedup": False}, headers=auth),
                anonymous.post("/ledgers/locked/clock", json={"advance_seconds": 10**6}, headers=auth),
                anonymous.post("/ledgers/locked/effects/op-1/withdraw", headers=auth),
                anonymous.post("/ledgers/locked/effects", json={**BODY, "reference": "op-2"}, headers=auth),
                anonymous.get("/ledgers/locked/effects/op-1", headers=auth),
                anonymous.get("/openapi.json", headers=auth),
            ]
            assert [a.status_code for a in answers] == [401] * len(answers)
            assert all(a.headers["WWW-Authenticate"] == "Bearer" for a in answers)
        health = anonymous.get("/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok", "failures": 0, "failure": None})
    assert log_size(provider) == before
    with provider.client() as http:
        # Still deduplicating, clock unmoved, nothing withdrawn: the contract the refused calls tried to change.
        again = http.post("/ledgers/locked/effects", json=BODY, headers={"Idempotency-Key": "locked-1"})
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert http.get("/ledgers/locked/effects/op-1").status_code == 200


def test_a_refused_requests_body_is_read_before_the_401_so_the_answer_is_not_reset(provider: Standalone) -> None:
    """The provider closes a refused connection. Had it answered before the body came in,
    the body would reach a closed socket (or lie unread in it), the kernel would reset
    the connection, and the client could lose the 401 (seen in CI as ECONNRESET)."""
    head = b"PUT /ledgers/late-body HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
    with socket.create_connection(("127.0.0.1", provider.port), timeout=10) as conn:
        conn.sendall(head)
        conn.settimeout(0.3)
        with pytest.raises(TimeoutError):
            conn.recv(1)  # no answer while the body is still to come
        conn.settimeout(10)
        conn.sendall(b"{}")
        answer = b""
        while chunk := conn.recv(65536):  # then the whole answer, and a clean end of the stream
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ") and answer.endswith(b'"missing or wrong bearer token"}')


def test_a_malformed_chaos_header_is_400_and_leaves_the_key_free(provider: Standalone) -> None:
    with provider.client() as http:
        http.put("/ledgers/chaos", json={})
        for bad in ("{not json", "[]", '{"hit": 1}', "x" * 3000):
            headers = {"Idempotency-Key": "chaos-1", "X-Testbed-Chaos": bad}
            assert http.post("/ledgers/chaos/effects", json=BODY, headers=headers).status_code == 400
        # Before the fix the key stayed claimed for good: every retry and every lookup answered 409.
        assert http.get("/ledgers/chaos/effects/op-1").status_code == 404
        first = http.post("/ledgers/chaos/effects", json=BODY, headers={"Idempotency-Key": "chaos-1"})
        assert first.status_code == 201


def test_a_huge_body_is_refused_unread(provider: Standalone) -> None:
    """100 MB declared and streamed: 413 as soon as the headers are in, and the provider does not buffer it."""
    assert provider.proc is not None
    rss = psutil.Process(provider.proc.pid).memory_info().rss
    status, sent = _post_huge(provider, 100 * 1024 * 1024, chunked=False)
    assert status == 413
    assert sent < 10 * 1024 * 1024, f"the client got to send {sent} bytes before the answer"
    status, _ = _post_huge(provider, 8 * 1024 * 1024, chunked=True)  # no length declared: cut off at the cap
    assert status == 413
    grown = psutil.Process(provider.proc.pid).memory_info().rss - rss
    assert grown < 16 * 1024 * 1024, f"provider RSS grew by {grown / 2**20:.1f} MB"


def test_numbers_are_finite_and_bounded(provider: Standalone) -> None:
    with provider.client() as http:
        http.put("/ledgers/clock", json={})
        for raw in (b'{"advance_seconds": Infinity}', b'{"advance_seconds": NaN}', b'{"advance_seconds": 1e300}'):
            answer = http.post("/ledgers/clock/clock", content=raw, headers={"Content-Type": "application/json"})
            assert answer.status_code == 400
        raw = b'{"retention_seconds": Infinity}'
        assert http.put("/ledgers/clock", content=raw, headers={"Content-Type": "application/json"}).status_code == 400
        # Nothing was added to the clock by the refused steps.
        assert http.post("/ledgers/clock/clock", json={"advance_seconds": 1}).json() == {"offsetSeconds": 1.0}
        attempt = {"X-Testbed-Attempt": str(2**70)}
        assert http.post("/ledgers/clock/effects", json=BODY, headers=attempt).status_code == 400


def test_long_keys_are_refused_and_not_stored(provider: Standalone) -> None:
    with provider.client() as http:
        http.put("/ledgers/keys", json={})
        before = log_size(provider)
        for key in ("k" * 256, "k" * 20_000):  # (a head over 32 KiB is refused before its key is read: 431)
            answer = http.post("/ledgers/keys/effects", json=BODY, headers={"Idempotency-Key": key})
            assert answer.status_code == 400
            assert len(answer.content) < 200  # the error does not repeat the key
        assert log_size(provider) == before
        assert http.post("/ledgers/keys/effects", json=BODY, headers={"Idempotency-Key": "k" * 255}).status_code == 201


def test_errors_do_not_echo_the_input(provider: Standalone) -> None:
    marker = "MARKER-" + "z" * 40
    with provider.client() as http:
        http.put("/ledgers/echo", json={})
        answers = [
            http.post("/ledgers/echo/effects", json={**BODY, marker: marker}),
            http.post("/ledgers/echo/effects", json={**BODY, "reference": marker * 10}),
            http.post("/ledgers/echo/effects", content=marker.encode(), headers={"Content-Type": "application/json"}),
            http.post(f"/ledgers/{marker}/effects", json=BODY),
            http.get(f"/ledgers/{marker}/effects/op-1"),
        ]
    assert [a.status_code for a in answers] == [400, 400, 400, 404, 404]
    assert not [a.text for a in answers if "MARKER" in a.text]


def _statuses(report_dir: Path) -> dict[int, int]:
    """Status codes of every response schemathesis received, from its ndjson event log."""
    import json
    from collections import Counter

    counts: Counter[int] = Counter()
    for path in report_dir.glob("*.ndjson"):
        for line in path.read_text().splitlines():
            for status in _find_statuses(json.loads(line)):
                counts[status] += 1
    return dict(counts)


def _find_statuses(node: object) -> list[int]:
    if isinstance(node, dict):
        found = [node["status_code"]] if isinstance(node.get("status_code"), int) and "elapsed" in node else []
        return found + [s for v in node.values() for s in _find_statuses(v)]
    if isinstance(node, list):
        return [s for v in node for s in _find_statuses(v)]
    return []


def _post_huge(provider: Standalone, size: int, chunked: bool) -> tuple[int, int]:
    """Send a body of `size` bytes, stopping as soon as the provider answers; the status and the bytes sent."""
    framing = b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode()
    head = b"POST /ledgers/fuzz/effects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Authorization: Bearer {provider.token}\r\n".encode() + framing + b"\r\n\r\n"
    chunk = b"a" * 65536
    piece = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
    sent, pending = 0, b""
    with socket.create_connection(("127.0.0.1", provider.port), timeout=30) as conn:
        conn.sendall(head)
        conn.setblocking(False)
        answer = b""
        while sent < size:
            try:
                answer += conn.recv(65536)
                break  # the provider has answered
            except BlockingIOError:
                pass
            except ConnectionError:
                break
            pending = pending or piece
            try:
                n = conn.send(pending)
            except BlockingIOError:
                time.sleep(0.001)  # the provider is not reading: wait for its answer
                continue
            except ConnectionError:
                break
            pending, sent = pending[n:], sent + n
        conn.setblocking(True)
        while b"\r\n" not in answer:
            more = conn.recv(65536)
            if not more:
                break
            answer += more
    return int(answer.split(b" ", 2)[1]), sent
