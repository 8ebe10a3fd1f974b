"""The provider as its own process, over HTTP: the Idempotency-Key contract and its reads."""

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis
import requests

from labcore.boundaries import Boundary
from labcore.bus import Bus
from labcore.credentials import bearer
from labcore.events import Hit
from labcore.faults import Fault
from labcore.ids import HitId
from labcore.keys import RunKeys
from labcore.procs import free_port, stop_all
from provider.contract import Contract
from provider.store import LogReader
from provider.wire import CHAOS
from testbed.infra.provider_process import ProviderAdmin, ProviderProcess, provider_client

pytestmark = pytest.mark.e2e

NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)
BODY = {"reference": "op-1", "recipient": "a@example.test", "message": "hello"}

# The provider's process, its port and its log's path.
ProviderRunning = tuple[subprocess.Popen[bytes], int, Path]

# A client of the provider, and its log's path.
Provider = tuple[httpx.Client, Path]


@pytest.fixture(scope="module")
def provider_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderRunning]:
    db = tmp_path_factory.mktemp("provider") / "log.sqlite3"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "provider", "--port", str(port), "--db", str(db)])
    yield proc, port, db
    proc.terminate()
    assert proc.wait(10) == 0


@pytest.fixture(scope="module")
def provider(provider_process: ProviderRunning) -> Iterator[Provider]:
    _, port, db = provider_process
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=5)
    for _ in range(200):
        try:
            client.get("/health")
            break
        except httpx.TransportError:
            time.sleep(0.05)
    yield client, db
    client.close()


def ledger(client: httpx.Client, name: str, **contract: object) -> str:
    assert client.put(f"/ledgers/{name}", json=contract).status_code == 200
    return f"/ledgers/{name}/effects"


def test_replay_conflict_and_keyless_duplicates(provider: Provider) -> None:
    client, db = provider
    path = ledger(client, "contract")
    first = client.post(path, json=BODY, headers={"Idempotency-Key": "k1"})
    again = client.post(path, json=BODY, headers={"Idempotency-Key": "k1"})
    changed = client.post(path, json={**BODY, "message": "other"}, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert changed.status_code == 422
    client.post(path, json={**BODY, "reference": "op-2"})
    client.post(path, json={**BODY, "reference": "op-2"})
    records = LogReader(db).records("contract", ["op-1", "op-2"])
    assert (records["op-1"].effects, records["op-1"].sends) == (1, 3)
    assert records["op-2"].effects == 2  # no key, no contract


def test_concurrent_requests_with_one_key_make_one_effect(provider: Provider) -> None:
    client, db = provider
    path = ledger(client, "race")
    barrier = threading.Barrier(20)
    statuses = []

    def send() -> None:
        barrier.wait()
        statuses.append(client.post(path, json=BODY, headers={"Idempotency-Key": "same"}).status_code)

    threads = [threading.Thread(target=send) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert LogReader(db).records("race", ["op-1"])["op-1"].effects == 1
    assert set(statuses) <= {201, 409}


def test_stored_error_is_replayed(provider: Provider) -> None:
    client, db = provider
    path = ledger(client, "declines", decline_domain="declined.example")
    body = {**BODY, "recipient": "u@declined.example"}
    first = client.post(path, json=body, headers={"Idempotency-Key": "d"})
    again = client.post(path, json=body, headers={"Idempotency-Key": "d"})
    assert first.status_code == again.status_code == 402
    assert again.headers["Idempotent-Replayed"] == "true"
    assert LogReader(db).records("declines", ["op-1"])["op-1"].declined == 1


def test_reads_separate_absent_withdrawn_and_lagging(provider: Provider) -> None:
    client, _ = provider
    path = ledger(client, "reads")
    assert client.get(f"{path}/op-1").status_code == 404
    client.post(path, json=BODY)
    found = client.get(f"{path}/op-1")
    assert found.status_code == 200 and found.json()["found"] is True
    assert len(client.get(path, params={"reference": "op-1"}).json()["data"]) == 1
    assert client.post(f"{path}/op-1/withdraw").json() == {"withdrawn": 1}
    assert client.get(f"{path}/op-1").status_code == 410
    assert client.get(path, params={"reference": "op-1"}).json()["data"] == []

    lagging = ledger(client, "lagging", listing_lag_seconds=3600, single_lookup=False)
    client.post(lagging, json=BODY)
    assert client.get(lagging, params={"reference": "op-1"}).json()["data"] == []
    assert client.get(f"{lagging}/op-1").status_code == 501


def test_key_expiry_follows_the_ledger_clock(provider: Provider) -> None:
    client, db = provider
    path = ledger(client, "expiry", retention_seconds=60)
    client.post(path, json=BODY, headers={"Idempotency-Key": "e"})
    client.post("/ledgers/expiry/clock", json={"advance_seconds": 61})
    assert client.post(path, json=BODY, headers={"Idempotency-Key": "e"}).status_code == 201
    assert LogReader(db).records("expiry", ["op-1"])["op-1"].effects == 2


def test_bad_requests(provider: Provider) -> None:
    client, _ = provider
    path = ledger(client, "bad")
    assert client.post(path, json={"reference": "op-1"}).status_code == 400
    assert client.post("/ledgers/nowhere/effects", json=BODY).status_code == 404


def test_a_send_is_answered_alike_whatever_its_json_content_type(provider: Provider) -> None:
    """A JSON content type with a charset is a JSON content type: the same status, headers
    and body, for a send, its replay and a reuse of its key with another payload."""
    client, _ = provider
    path = ledger(client, "alike")

    def exchange(content_type: str, n: int) -> list[tuple[int, dict[str, str], dict[str, Any]]]:
        body = {**BODY, "reference": f"alike-{n}"}
        answers = []
        for sent in (body, body, {**body, "message": "another"}):
            headers = {"Content-Type": content_type, "Idempotency-Key": f"alike-{n}"}
            r = client.post(path, content=json.dumps(sent), headers=headers)
            assert int(r.headers["content-length"]) == len(r.content)
            seen = {k: v for k, v in r.headers.items() if k not in ("date", "content-length")}  # ids differ
            answers.append((r.status_code, seen, {k: v for k, v in r.json().items() if k not in ("id", "reference")}))
        return answers

    fast, routed = exchange("application/json", 1), exchange("application/json; charset=utf-8", 2)
    assert [status for status, _, _ in fast] == [201, 201, 422]
    assert fast[1][1]["idempotent-replayed"] == "true"
    assert fast == routed


def test_the_provider_runs_on_uvloop(provider_process: ProviderRunning, provider: Provider) -> None:
    """uvloop is a dependency for the provider's CPU per request: a lost dependency shows here."""
    maps = psutil.Process(provider_process[0].pid).memory_maps()
    assert any("uvloop" in m.path for m in maps), "the provider's event loop is asyncio's"


@contextlib.contextmanager
def a_runs_provider(
    workdir: Path, redis_url: str, ledger: str
) -> Iterator[tuple[ProviderProcess, subprocess.Popen[bytes]]]:
    """A provider as a run starts it, with one ledger: the test stops its process, as a run does."""
    process = ProviderProcess(workdir, redis_url, f"testbed:{ledger}")
    process.launch()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        process.wait_ready()
        procs = process.release()
        admin = ProviderAdmin(process.url, process.token)
        admin.put_ledger(ledger, Contract())
        admin.close()
        yield process, procs[0]
    finally:
        stop_all([*procs, *process.release()])


def test_a_request_held_for_a_controller_that_is_gone_does_not_hold_the_providers_shutdown(
    private_redis_url: str, tmp_path: Path
) -> None:
    """At a run's end a held request may wait for a release that will never come: the
    provider's SIGTERM must stop it anyway, within its graceful second, and not
    wait until the run's grace runs out and a SIGKILL follows."""
    with (
        a_runs_provider(tmp_path, private_redis_url, "held") as (process, proc),
        provider_client(process.url, process.token, timeout=30) as http,
    ):
        held = _held(http, private_redis_url, "held", Boundary.AFTER_EFFECT, Fault.KILL)  # awaits a release
        stop_all([proc], grace=30)
        held.join(30)
    assert proc.returncode in (0, -15)  # not -SIGKILL: it stopped by itself


def test_a_runs_provider_with_nothing_in_progress_ends_at_its_sigterm(private_redis_url: str, workdir: Path) -> None:
    """A run's provider stopped between requests does not wait for anything: it closes
    its store and dies by the SIGTERM, with an idle keep-alive connection open.
    What it applied is in its log."""
    with a_runs_provider(workdir, private_redis_url, "idle") as (process, proc):
        assert (workdir / "provider.sock").exists()  # a short dir: the run's unix socket
        with provider_client(process.url, process.token, timeout=10) as http:
            assert http.post("/ledgers/idle/effects", json=BODY).status_code == 201
            stop_all([proc])  # the connection stays open, idle, across the stop
    assert proc.returncode == -15
    assert LogReader(process.db).records("idle", ["op-1"])["op-1"].effects == 1


def test_a_crashed_runs_provider_refuses_no_connection_while_it_restarts(private_redis_url: str, workdir: Path) -> None:
    """The lab holds the provider's listening sockets across a crash: a request made
    while the provider is dead waits for the next one and is answered; only the
    requests the dead one held could fail (a crash is a fault for them alone)."""
    process = ProviderProcess(workdir, private_redis_url, "testbed:restart")
    process.launch()
    try:
        process.wait_ready()
        answered: list[tuple[float, float]] = []  # when each answered request was sent, and answered
        refused: list[httpx.ConnectError] = []
        done = threading.Event()

        def knock() -> None:
            # A fresh connection per request, as a job that opens its own.
            with httpx.Client(base_url=process.url, trust_env=False, timeout=10, limits=NO_KEEPALIVE) as http:
                while not done.is_set():
                    sent = time.monotonic()
                    try:
                        if http.get("/health").status_code == 200:
                            answered.append((sent, time.monotonic()))
                    except httpx.ConnectError as exc:
                        refused.append(exc)
                    except httpx.TransportError:
                        pass  # held by the provider as it died: the crash's own request

        knocker = threading.Thread(target=knock)
        knocker.start()
        try:
            time.sleep(0.1)
            old = process.pid
            psutil.Process(old).kill()
            killed = time.monotonic()
            process.relaunch()
            ready = time.monotonic()
            time.sleep(0.1)
        finally:
            done.set()
            knocker.join(30)
        assert process.pid != old
        assert refused == []
        # Sent before the next provider was ready, answered after the kill (so by the next
        # provider): it waited out the restart in the backlog.
        assert any(sent < ready and back > killed for sent, back in answered), "no request spanned the restart"
    finally:
        stop_all(process.release())


def test_a_provider_about_to_crash_leaves_new_connections_to_the_next_one(
    private_redis_url: str, workdir: Path
) -> None:
    """Between the planned crash's report and the kill, the provider accepts no new
    connection: another op's request waits in the backlog the lab holds and is answered
    by the restarted provider, instead of being turned away (a fault nobody planned)."""
    process = ProviderProcess(workdir, private_redis_url, "testbed:doomed")
    process.launch()
    try:
        process.wait_ready()
        admin = ProviderAdmin(process.url, process.token)
        admin.put_ledger("doomed", Contract())
        admin.close()
        with provider_client(process.url, process.token, timeout=30) as armed_client:
            # Reported: the provider waits to be killed.
            doomed = _held(armed_client, private_redis_url, "doomed", Boundary.BEFORE_EFFECT, Fault.PROVIDER_CRASH)

            def other_op() -> int:
                with provider_client(process.url, process.token, timeout=30) as http:
                    return http.post("/ledgers/doomed/effects", json={**BODY, "reference": "op-2"}).status_code

            answers = _waits_for_the_next_provider(process, other_op)
            doomed.join(20)
        assert answers == [201]
        assert LogReader(process.db).records("doomed", ["op-1", "op-2"])["op-2"].effects == 1
    finally:
        stop_all(process.release())


@pytest.mark.parametrize("pooled", [requests.Session, httpx.Client], ids=["requests", "httpx"])
def test_a_provider_about_to_crash_holds_a_request_on_a_kept_connection_for_the_next_one(
    private_redis_url: str, workdir: Path, pooled: Callable[[], requests.Session | httpx.Client]
) -> None:
    """A pooled client's next request, on the connection it kept open, made while the provider
    drains for its planned crash: held for the restarted provider as a new connection is, not
    turned away (503) as a fault nobody planned for that op."""
    process = ProviderProcess(workdir, private_redis_url, "testbed:kept")
    process.launch()
    try:
        process.wait_ready()
        effects, auth = f"{process.url}/ledgers/kept/effects", bearer(process.token)
        with pooled() as client, provider_client(process.url, process.token, timeout=30) as armed_client:
            assert armed_client.put("/ledgers/kept", json={}).status_code == 200
            assert client.post(effects, json={**BODY, "reference": "op-2"}, headers=auth).status_code == 201
            doomed = _held(armed_client, private_redis_url, "kept", Boundary.BEFORE_EFFECT, Fault.PROVIDER_CRASH)

            def other_op() -> int:
                return client.post(effects, json={**BODY, "reference": "op-3"}, headers=auth).status_code

            answers = _waits_for_the_next_provider(process, other_op)
            doomed.join(20)
        assert answers == [201]
    finally:
        stop_all(process.release())


def _waits_for_the_next_provider(process: ProviderProcess, request: Callable[[], int]) -> list[int]:
    """`request` made in a thread while the provider drains for its crash: not answered (it
    waits) until the provider is killed and restarted; what it was answered then."""
    answers: list[int] = []
    other = threading.Thread(target=lambda: answers.append(request()))
    other.start()
    other.join(0.5)
    assert other.is_alive() and answers == [], answers  # not turned away: waiting
    psutil.Process(process.pid).kill()
    process.relaunch()
    other.join(20)
    return answers


def _held(http: httpx.Client, redis_url: str, ledger: str, boundary: Boundary, fault: Fault) -> threading.Thread:
    """An armed request of op-1 on `ledger`, sent in a thread, once the provider has reported it held."""
    hit = Hit(str(HitId("c001", 1, 1, boundary)), "c001", "op-1", 1, boundary, fault, 1, "w1", bus=f"testbed:{ledger}")
    armed = {"json": BODY, "headers": {CHAOS: hit.header()}}
    sending = threading.Thread(target=_send_quietly, args=(http, f"/ledgers/{ledger}/effects", armed))
    sending.start()
    bus = Bus(redis.Redis.from_url(redis_url), RunKeys(f"testbed:{ledger}"))
    assert isinstance(bus.next(timeout=20), Hit)
    return sending


def _send_quietly(http: httpx.Client, path: str, request: dict[str, Any]) -> None:
    """A request whose answer the test does not need (the server goes away under it)."""
    with contextlib.suppress(httpx.TransportError):
        http.post(path, **request)
