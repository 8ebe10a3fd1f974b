"""A wrong expectation fails the run; no run leaves a process or a temp dir behind,
not even when interrupted; a run on a shared Redis touches only its own keys."""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import (
    Seen,
    SharedRedis,
    assert_left_nothing,
    descendants,
    finish,
    redis_server,
    run_testbed,
    sigint_disposition,
    start_testbed,
    still_running,
)

pytestmark = pytest.mark.e2e

SMALL = ["--ops", "20", "--strategy", "retry-only", "--boundary", "after-effect"]


def test_a_wrong_expectation_exits_1_and_names_the_cell(workdir: Path) -> None:
    ran = run_testbed([*SMALL, "--expect", "retry-only@after-effect=20/0"], workdir)
    assert ran.code == 1, ran.stderr
    assert "DIFFERS  retry-only @ after-effect (kill): effects expected 20, observed 22" in ran.stdout
    row = ran.row("retry-only", "after-effect")
    assert row["verdict"] == "fail" and row["effects"] == 22
    assert ran.json["verdict"] == "fail"
    assert_left_nothing(ran)


def test_the_right_expectation_passes(workdir: Path) -> None:
    ran = run_testbed([*SMALL, "--expect", "retry-only@after-effect=22/0"], workdir)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert_left_nothing(ran)


def test_sigint_stops_everything_the_run_started(workdir: Path) -> None:
    proc, _, err = start_testbed(["--ops", "300"], workdir)
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 60
    while "/12] " not in err.read_text():  # the stack is up and a cell has run
        seen |= descendants(proc.pid)
        assert proc.poll() is None, err.read_text()
        assert time.monotonic() < deadline, "no cell finished"
        time.sleep(0.05)
    seen |= descendants(proc.pid)
    assert len(seen) >= 4
    disposition = sigint_disposition(proc.pid)
    proc.send_signal(signal.SIGINT)
    ran = finish(proc, workdir, timeout=60, seen=seen)
    assert ran.code == 130, f"exit {ran.code}, SIGINT {disposition} when sent; stderr: {ran.stderr[-1500:]}"
    assert ran.stderr.strip().splitlines()[-1].startswith("testbed: error: interrupted")
    assert "Traceback" not in ran.stderr
    assert still_running(seen) == []
    assert_left_nothing(ran)


@pytest.fixture
def shared_redis(tmp_path: Path) -> Iterator[SharedRedis]:
    """Another Redis, standing in for one the user shares with other programs (and has to
    themselves: it takes clients without a password, so each run says --redis-private)."""
    with redis_server(tmp_path) as (url, client):
        client.set("someone-elses:key", "untouched")
        client.rpush("rq:queue:default", "not ours")
        yield url, client


def test_shared_redis_run_touches_only_its_own_keys(workdir: Path, shared_redis: SharedRedis) -> None:
    url, client = shared_redis
    ran = run_testbed([*SMALL, "--redis-url", url, "--redis-private", "--keep"], workdir)
    assert ran.code == 0, ran.stderr
    # redis-py types keys() as bytes | str; a client without decode_responses gets bytes.
    found = client.keys("*")
    run_keys = [k.decode() for k in found if not k.startswith((b"someone-elses:", b"rq:queue:default"))]  # type: ignore[union-attr, arg-type]
    prefix = f"testbed:{ran.json['run']}:"
    assert run_keys, "a kept run leaves its keys for inspection"
    assert all(key.startswith(prefix) for key in run_keys), [k for k in run_keys if not k.startswith(prefix)]
    assert any(key.startswith(prefix + "rq:") for key in run_keys)  # RQ's own keys carry the prefix too

    (workdir / "again").mkdir()
    again = run_testbed([*SMALL, "--redis-url", url, "--redis-private"], workdir / "again")
    assert again.code == 0, again.stderr
    assert not client.keys(f"testbed:{again.json['run']}:*")  # removed after the run
    assert client.get("someone-elses:key") == b"untouched"
    assert client.lrange("rq:queue:default", 0, -1) == [b"not ours"]
    assert_left_nothing(again)


def test_a_private_redis_that_fails_to_start_stops_the_provider_launched_beside_it(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider boots while the private Redis starts (it reaches Redis only later):
    when Redis never answers, the run exits 2 naming it, and the provider is stopped too."""
    fake = tmp_path / "bin" / "redis-server"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nsleep 1\necho 'fake redis-server: refusing to start'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    proc, _, _ = start_testbed(["--ops", "1", "-b", "none"], workdir)
    processes: dict[int, Seen] = {}
    ran = finish(proc, workdir, timeout=30, processes=processes)
    assert ran.code == 2, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert last == "testbed: error: private redis-server did not start: fake redis-server: refusing to start"
    assert [s for s in processes.values() if s.argv[1:3] == ["-m", "provider"]], (
        "no provider launched before Redis answered"
    )
    assert_left_nothing(ran)
