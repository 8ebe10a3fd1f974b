"""Users' jobs the end-to-end tests run through the lab (not collected: no test_ prefix)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from typing import Any

import httpx
import psutil
import requests

import testbed

TIMEOUT = 1.0


def _url() -> str:
    return f"{os.environ['TESTBED_PROVIDER_URL']}/api/messages"


def send_with_requests(op_id: str, payload: dict[str, Any]) -> str:
    response = requests.post(_url(), json=payload, headers={"Idempotency-Key": op_id}, timeout=TIMEOUT)
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt


def send_with_httpx(op_id: str, payload: dict[str, Any]) -> str:
    # Plain HTTP on loopback: no TLS, so no CA bundle to load in every work-horse (about 40 ms each).
    with httpx.Client(timeout=TIMEOUT, verify=False) as client:
        response = client.post(_url(), json=payload, headers={"Idempotency-Key": op_id})
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt


def _urllib_post(op_id: str, payload: dict[str, Any]) -> str:
    request = urllib.request.Request(
        _url(), data=json.dumps(payload).encode(), method="POST", headers={"Idempotency-Key": op_id}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        receipt: str = json.loads(response.read())["id"]
    return receipt


def send_with_urllib(op_id: str, payload: dict[str, Any]) -> str:
    """A client the lab does not instrument, with the boundaries marked by hand."""
    testbed.boundary("before-request")
    receipt = _urllib_post(op_id, payload)
    testbed.boundary("after-receipt")
    return receipt


def send_with_urllib_unmarked(op_id: str, payload: dict[str, Any]) -> str:
    return _urllib_post(op_id, payload)


def raises(op_id: str, payload: dict[str, Any]) -> None:
    raise RuntimeError(f"a bug in the job itself ({op_id})")


def hangs(op_id: str, payload: dict[str, Any]) -> None:
    time.sleep(3600)


def leaves_a_process(op_id: str, payload: dict[str, Any]) -> str:
    """Sends, leaving two processes behind (their pids in $LEFTOVER_PIDS): one in its
    work-horse's process group, and one that leaves the group."""
    for alone in (False, True):
        child = subprocess.Popen(["sleep", "600"], process_group=0 if alone else None)
        with open(os.path.join(os.environ["LEFTOVER_PIDS"], str(child.pid)), "w"):
            pass
    return send_with_requests(op_id, payload)


def shouts(op_id: str, payload: dict[str, Any]) -> str:
    """Sends, and writes 1 MB to its stdout."""
    sys.stdout.write("x" * 1_000_000 + "\n")
    sys.stdout.flush()
    return send_with_requests(op_id, payload)


def exits_at_once(op_id: str, payload: dict[str, Any]) -> None:
    """Ends its work-horse with 0 before the job has ended."""
    os._exit(0)


def breaks_on_first_run(op_id: str, payload: dict[str, Any]) -> str:
    """Exactly-once (its op id as the key), but the first time it ever runs (no marker yet in
    $FIRST_RUN_DIR) it sends twice without a key: a breach that no fresh run reproduces. The
    marker is written after both sends, so an attempt killed between them is a first run again."""
    marker = os.path.join(os.environ["FIRST_RUN_DIR"], "ran")
    if os.path.exists(marker):
        return send_with_requests(op_id, payload)
    for _ in range(2):
        response = requests.post(_url(), json=payload, timeout=TIMEOUT)
        response.raise_for_status()
    with open(marker, "w"):
        pass
    receipt: str = response.json()["id"]
    return receipt


NOT_A_FUNCTION = 42


SHORT_TIMEOUT = 0.2  # a loaded CI runner's client timeout, as issue 58 met it


def _the_runs_provider() -> psutil.Process:
    """The provider process of the run this work-horse works for: a child of one of its ancestors."""
    for ancestor in psutil.Process().parents():
        for child in ancestor.children():
            if child.cmdline()[1:3] == ["-m", "provider"]:
                return child
    raise RuntimeError("no provider among the work-horse's kin")


def times_out_once(op_id: str, payload: dict[str, Any]) -> str:
    """Sends with no key and a 0.2 s client timeout. The first attempt to create $PAUSE_ONCE
    stops the run's provider (SIGSTOP) while it sends, so that its client times out whatever
    the machine's load; the provider goes on once the client has given up."""
    try:
        os.close(os.open(os.environ["PAUSE_ONCE"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return _send_unkeyed(payload)
    provider = _the_runs_provider()
    provider.suspend()
    try:
        return _send_unkeyed(payload)
    finally:
        provider.resume()


def _send_unkeyed(payload: dict[str, Any]) -> str:
    response = requests.post(_url(), json=payload, timeout=SHORT_TIMEOUT)
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt


def sleeps_then_sends(op_id: str, payload: dict[str, Any]) -> str:
    """A second in its work-horse first: long enough for a test to find the horse and kill it."""
    time.sleep(1.0)
    return send_with_requests(op_id, payload)


def outlives_a_short_timeout(op_id: str, payload: dict[str, Any]) -> str:
    """Three seconds before it sends: well past an engine's short timeout of its attempt, however
    late the engine's timer fires on a busy machine."""
    time.sleep(3.0)
    return send_with_requests(op_id, payload)


GIVES_UP = 0.01  # the client timeout of the stranded kill issue 58 met


def gives_up_while_the_lab_stops(op_id: str, payload: dict[str, Any]) -> str:
    """Its client gives up after 0.01 s. The first attempt to create $PAUSE_LAB stops the
    run's own process (SIGSTOP) first, so that the lab cannot kill it at its boundary before
    its client gives up, whatever the machine's load; once the provider has applied its effect
    (and so reached the boundary it holds the request at), it writes the run's pid and its own
    into $PAUSE_LAB for the test, which resumes the run once this work-horse is gone."""
    try:
        os.close(os.open(os.environ["PAUSE_LAB"] + ".taken", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return _send_keyed(op_id, payload, TIMEOUT)
    lab = next(p for p in psutil.Process().parents() if p.cmdline()[1:3] == ["-m", "testbed"])
    lab.suspend()
    try:
        return _send_keyed(op_id, payload, GIVES_UP)
    finally:
        _await_an_effect(_the_runs_provider())
        with open(os.environ["PAUSE_LAB"] + ".tmp", "w") as out:
            out.write(f"{lab.pid} {os.getpid()}")
        os.replace(os.environ["PAUSE_LAB"] + ".tmp", os.environ["PAUSE_LAB"])


def _await_an_effect(provider: psutil.Process) -> None:
    argv = provider.cmdline()
    db = argv[argv.index("--db") + 1]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as log:
            if log.execute("SELECT count(*) FROM effects").fetchone()[0]:
                return
        time.sleep(0.01)
    raise RuntimeError("the provider applied no effect")


def _send_keyed(op_id: str, payload: dict[str, Any], timeout: float) -> str:
    response = requests.post(_url(), json=payload, headers={"Idempotency-Key": op_id}, timeout=timeout)
    response.raise_for_status()
    receipt: str = response.json()["id"]
    return receipt
