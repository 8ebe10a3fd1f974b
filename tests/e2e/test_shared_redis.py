"""A shared Redis is a trust boundary: one that takes clients without a password is refused
unless the user says it is theirs alone, and even then another client of it, reading the
run's jobs and writing one of its own, finds no secret and runs no code."""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from testbed.infra.stack import require_password
from tests.support.helpers import TESTBED, SharedRedis, assert_left_nothing, finish, redis_server, start_testbed

pytestmark = pytest.mark.e2e

ROOT = str(Path(__file__).resolve().parents[2])
RUN = ["--handler", "examples.keyed:send", "--path", ROOT, "-b", "none", "--ops", "60", "--no-store"]


def test_a_redis_without_a_password_is_refused_before_anything(workdir: Path, tmp_path: Path) -> None:
    with redis_server(tmp_path) as (url, client):
        chaos, _, _ = start_testbed(["--redis-url", url, *RUN], workdir)
        host = subprocess.run([*TESTBED, "host", "--redis-url", url], capture_output=True, text=True, timeout=60)
        ran = finish(chaos, workdir, timeout=60)
        for code, stderr in ((ran.code, ran.stderr), (host.returncode, host.stderr)):
            assert code == 2, stderr
            (line,) = stderr.strip().splitlines()
            assert "takes clients without a password" in line and "--redis-private" in line
        assert client.dbsize() == 0
        assert_left_nothing(ran)


def test_a_redis_with_a_password_is_taken(tmp_path: Path) -> None:
    with redis_server(tmp_path, password="pw-of-the-user") as (url, _):
        require_password(url)  # the stranger it sends is told NOAUTH


class _Payload:
    """What another client of the Redis puts in a job: code, if the workers unpickle it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _scan(client: SharedRedis, pattern: str) -> list[str]:
    return [k.decode() for k in client[1].scan_iter(pattern, count=1000)]


def test_another_client_finds_no_secret_in_the_jobs_and_runs_no_code(workdir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran-as-the-lab"
    with redis_server(tmp_path) as shared:
        client = shared[1]
        proc, _, _ = start_testbed(["--redis-url", shared[0], "--redis-private", "--keep", *RUN], workdir)
        # The run's keys, as another client finds them; a job of its own, first in the run's queue.
        deadline = time.monotonic() + 60
        while not (owners := _scan(shared, "testbed:*:owner")):
            assert proc.poll() is None and time.monotonic() < deadline, (workdir / "stderr.txt").read_text()
            time.sleep(0.01)
        rq = owners[0].removesuffix(":owner") + ":rq"
        job = pickle.dumps(("os.getcwd", None, (_Payload(marker),), {}))
        client.hset(f"{rq}:job:planted", mapping={"data": zlib.compress(job), "origin": "ops", "status": "queued"})
        client.rpush(f"{rq}:queue:ops", "planted")
        # Every job's arguments, read while the run goes.
        payloads: dict[str, bytes] = {}
        while proc.poll() is None:
            for key in _scan(shared, f"{rq}:job:*"):
                data = client.hget(key, "data")
                if isinstance(data, bytes) and not key.endswith(":planted"):
                    payloads[key] = zlib.decompress(data)
            time.sleep(0.05)
        ran = finish(proc, workdir, timeout=120)
        assert ran.code == 0, ran.stdout + ran.stderr
        planted = client.hgetall(f"{rq}:job:planted")
    (db,) = ran.tmpdir.glob("*/provider.sqlite3")
    with sqlite3.connect(db) as log:
        (secret,) = log.execute("SELECT secret FROM scope_secrets").fetchone()
    assert len(payloads) >= 20
    for raw in payloads.values():
        _, _, (spec, _, _), _ = json.loads(raw)  # JSON, not a pickle
        assert "secret" not in spec and secret.encode() not in raw
    # The planted job was taken and failed (it does not load as JSON); its code never ran.
    assert planted[b"status"] == b"failed", planted
    assert not marker.exists()
