"""Locked down by default: another local user can neither reach a run's Redis nor change its provider,
and the run's secrets appear on no command line. The attacker (tests/support/attacker.py) runs as `nobody`
during a real run; the run's verdict must be the one it has without an attacker."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
import redis

from labcore.credentials import BUS_URL_ENV, RQ_URL_ENV, TOKEN_ENV
from labcore.procs import free_port
from provider.limits import PER_CLIENT
from testbed.infra.redis_server import PrivateRedis
from tests.support.helpers import TESTBED, Ran, assert_left_nothing, descendants, finish, run_testbed, start_testbed
from tests.support.standalone import Standalone

pytestmark = pytest.mark.e2e

ATTACKER = Path(__file__).resolve().parents[1] / "support" / "attacker.py"
CELLS = ["--strategy", "provider-key", "--strategy", "retry-only", "--boundary", "after-effect", "--ops", "100"]
SYSTEM_PYTHON = "/usr/bin/python3"  # the attacker cannot run the project's venv (it lives under /root)


def _attacker_argv() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("running a second user needs root (to drop to uid nobody)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON} for the attacker")
    drop = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if subprocess.run([*drop, SYSTEM_PYTHON, "-c", "pass"], capture_output=True).returncode != 0:
        pytest.skip("cannot run a process as nobody:nogroup here")
    # The source on the command line: the test's own files may not be readable by nobody.
    return [*drop, SYSTEM_PYTHON, "-c", ATTACKER.read_text()]


@pytest.fixture
def open_workdir() -> Iterator[Path]:
    """A workdir every user may enter (as /tmp is), so that only the run's own permissions protect it."""
    base = Path(tempfile.mkdtemp(prefix="testbed-lockdown-", dir="/tmp"))
    (base / "tmp").mkdir()
    for d in (base, base / "tmp"):
        d.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_another_user_can_neither_reach_redis_nor_change_the_provider(open_workdir: Path) -> None:
    attacker = _attacker_argv()
    proc, _, _ = start_testbed(CELLS, open_workdir)
    seen: set[tuple[int, float]] = set()
    spy = subprocess.Popen([*attacker, str(proc.pid), "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        secrets, cmdlines, run_dir = _watch(proc, seen)
        ran = finish(proc, open_workdir, timeout=240, seen=seen)
        out, errors = spy.communicate(timeout=60)
    finally:
        for p in (proc, spy):
            if p.poll() is None:
                p.kill()
                p.wait()
    report = json.loads(out or "{}") if spy.returncode == 0 else pytest.fail(f"attacker failed: {errors!r}")

    # The attacker was another user, found the run's services as `ps` shows them, and kept trying.
    assert report["uid"] != 0
    assert report["targets"]["provider_port"] and report["targets"]["redis_unix"], report["targets"]
    assert report["rounds"] >= 3, report
    # (a) Redis: the socket's directory refuses another user; no TCP listener at all.
    assert report["targets"]["redis_tcp"] == []
    assert {r for replies in report["redis"].values() for r in replies} == {"connect: PermissionError"}, report
    # (b) The provider's admin routes without the token: 401, every one that reached it.
    answered = [s for s in report["provider"] if isinstance(s, int)]
    assert set(answered) == {401} and len(answered) >= 3 * 17, report["provider"]

    # Nothing secret on any command line; the private files are the owner's alone.
    assert len(secrets) == 3 and all(len(s) >= 32 for s in secrets)
    assert not [c for c in cmdlines for s in secrets if s in c]
    assert stat.S_IMODE(run_dir["dir"]) == 0o700 and stat.S_IMODE(run_dir["redis.conf"]) == 0o600

    # The verdict is the one the run has without an attacker.
    assert ran.code == 0, ran.stdout + ran.stderr
    key, retry = ran.row("provider-key", "after-effect"), ran.row("retry-only", "after-effect")
    assert (key["effects"], key["duplicateEffects"], key["missingOperations"]) == (100, 0, 0)
    assert (retry["effects"], retry["duplicateEffects"]) == (110, 10)
    assert_left_nothing(ran)


FLOOD = 25_000  # half-open connections the attacker holds
FEW_DESCRIPTORS = 4096  # the soft limit on descriptors the provider starts with: far fewer than the flood


@contextlib.contextmanager
def _few_descriptors() -> Iterator[None]:
    """Processes started inside begin with a soft limit of FEW_DESCRIPTORS (as on many machines);
    the hard limit, to which a process may raise it, is left as it is."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(FEW_DESCRIPTORS, before[0]), before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def _flood(attacker: list[str], target: str, seconds: float, *ports: int) -> subprocess.Popen[bytes]:
    """The attacker's flood (tests/support/attacker.py) in a process group of its own, to be killed whole."""
    argv = [*attacker, "flood", target, str(seconds), str(FLOOD), *map(str, ports)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", start_new_session=True)


def _flood_report(flood: subprocess.Popen[bytes]) -> dict[str, Any]:
    try:
        out, errors = flood.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(flood.pid, signal.SIGKILL)
        flood.wait()
    if flood.returncode != 0:
        pytest.fail(f"attacker failed: {errors!r}")
    report: dict[str, Any] = json.loads(out)
    return report


def test_half_open_connections_from_another_user_change_no_verdict(open_workdir: Path) -> None:
    """A user holding half-sent requests to every port the run's provider listens on: the run's table
    is the one it has without them, or the run stops naming its provider (exit 3); never a finding."""
    attacker = _attacker_argv()
    with _few_descriptors():
        proc, _, _ = start_testbed(CELLS, open_workdir)
    flood = _flood(attacker, str(proc.pid), 50)
    try:
        ran = finish(proc, open_workdir, timeout=55)
        report = _flood_report(flood)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(flood.pid, signal.SIGKILL)

    # The attacker found the provider's port and kept its connections coming as fast as they were
    # accepted: the provider closed those past its cap. Its unix socket, in the run's private dir,
    # refuses another user.
    assert report["uid"] != 0 and len(report["ports"]) == 1, report
    assert report["opened"] > PER_CLIENT and report["closed_by_server"] > 0, report
    assert {r for replies in report["unix"].values() for r in replies} <= {"connect: PermissionError"}, report
    assert ran.code in (0, 3), ran.stdout + ran.stderr
    if ran.code == 3:
        assert "provider" in ran.stderr, ran.stderr
    else:
        key, retry = ran.row("provider-key", "after-effect"), ran.row("retry-only", "after-effect")
        assert (key["effects"], key["duplicateEffects"], key["missingOperations"]) == (100, 0, 0)
        assert (retry["effects"], retry["duplicateEffects"]) == (110, 10)
    assert_left_nothing(ran)


def test_a_standalone_provider_answers_health_under_half_open_connections(workdir: Path) -> None:
    attacker = _attacker_argv()
    with _few_descriptors():
        provider = Standalone(workdir / "p.sqlite3").start()
    flood = _flood(attacker, "0", 15, provider.port)
    answers: list[int | str] = []
    try:
        while flood.poll() is None:
            try:  # a new connection each time, as a new client's
                answers.append(httpx.get(f"{provider.url}/health", trust_env=False, timeout=30).status_code)
            except httpx.TransportError as exc:
                answers.append(type(exc).__name__)
            time.sleep(0.1)
        report = _flood_report(flood)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(flood.pid, signal.SIGKILL)
        provider.stop()
    assert len(answers) >= 10 and set(answers) == {200}, answers
    assert report["opened"] > PER_CLIENT and report["closed_by_server"] > 0, report


def _watch(proc: subprocess.Popen[bytes], seen: set[tuple[int, float]]) -> tuple[set[str], list[str], dict[str, int]]:
    """While the run starts: its secrets (read, as root, from its processes' environments),
    every command line of its processes, and the modes of its private files."""
    secrets: set[str] = set()
    cmdlines: list[str] = []
    modes: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while len(secrets) < 3 or not modes:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its stack was seen"
        seen |= descendants(proc.pid)
        for pid, _ in seen:
            try:
                p = psutil.Process(pid)
                cmdlines.append(" ".join(p.cmdline()))
                env = p.environ()
            except psutil.Error:
                continue
            secrets |= {env[k] for k in (TOKEN_ENV, BUS_URL_ENV) if k in env}
            if RQ_URL_ENV in env:
                secrets.add(env[RQ_URL_ENV].split("@")[0].rsplit(":", 1)[-1])  # the password alone
            db = next((a for a in p.cmdline() if a.endswith("provider.sqlite3")), None)
            if db and (Path(db).parent / "redis" / "redis.conf").exists():
                run_dir = Path(db).parent
                modes = {"dir": run_dir.stat().st_mode, "redis.conf": (run_dir / "redis" / "redis.conf").stat().st_mode}
        time.sleep(0.05)
    return secrets, cmdlines, modes


def test_a_standalone_provider_beyond_loopback_needs_a_token(workdir: Path) -> None:
    env_token = os.environ.pop(TOKEN_ENV, None)
    try:
        args = ["--host", "0.0.0.0", "--port", str(free_port()), "--db", str(workdir / "p.sqlite3")]
        ran: Ran = run_testbed(args, workdir, 60, "provider")
    finally:
        if env_token is not None:
            os.environ[TOKEN_ENV] = env_token
    assert ran.code == 2
    assert ran.stderr.strip().splitlines() == [
        f"testbed: error: refusing to serve on 0.0.0.0 without a token: set ${TOKEN_ENV} or pass --token-file"
    ]
    assert not (workdir / "p.sqlite3").exists()


def test_python_m_provider_beyond_loopback_needs_a_token_and_says_where_it_serves(workdir: Path) -> None:
    """The provider command the hosts' setup uses guards, announces and logs as `testbed provider` does."""
    db = workdir / "p.sqlite3"
    argv = [sys.executable, "-m", "provider", "--host", "0.0.0.0", "--port", str(free_port()), "--db", str(db)]
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"python -m provider: error: refusing to serve on 0.0.0.0 without a token: set ${TOKEN_ENV}"
    ]
    assert not db.exists()

    provider = Standalone(db).start()
    provider.stop()
    lines = db.with_suffix(".log").read_text().splitlines()
    assert lines[0] == f"python -m provider: serving {provider.url} (log {db})"
    assert any(line.endswith('"GET /health HTTP/1.1" 200 OK') for line in lines[1:]), lines


@pytest.mark.parametrize("long_path", [False, True], ids=["unix-socket", "tcp-fallback"])
def test_the_private_redis_requires_its_password(tmp_path: Path, long_path: bool) -> None:
    """On its socket, or on loopback TCP where the socket's path would be too long: never without the password."""
    workdir = tmp_path / ("x" * 90 if long_path else "run")
    workdir.mkdir()
    server = PrivateRedis(workdir)
    try:
        url = server.start()
        parts = urlsplit(url)
        assert parts.scheme == ("redis" if long_path else "unix") and parts.password
        if long_path:
            assert parts.hostname == "127.0.0.1"
        assert redis.Redis.from_url(url).ping()
        # Its clock ticks every 10 ms: a blocking pop's timeout ends on it (the run's loop waits so).
        assert redis.Redis.from_url(url).config_get("hz")["hz"] == "100"
        anonymous = redis.Redis.from_url(url.replace(f":{parts.password}@", ""))
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        assert stat.S_IMODE((workdir / "redis" / "redis.conf").stat().st_mode) == 0o600
        assert parts.password not in " ".join(psutil.Process(server.pid).cmdline())
    finally:
        server.stop()


def test_a_standalone_provider_takes_its_token_from_a_file(workdir: Path) -> None:
    token_file = workdir / "token"
    token_file.write_text("a-long-enough-secret-token-for-the-test\n")
    port = free_port()
    argv = [*TESTBED, "provider", "--port", str(port), "--db", str(workdir / "p.sqlite3")]
    argv += ["--token-file", str(token_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=5) as http:
            for _ in range(400):
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/health").status_code == 200:
                        break
                time.sleep(0.05)
            assert http.put("/ledgers/l", json={}).status_code == 401
            auth = {"Authorization": "Bearer a-long-enough-secret-token-for-the-test"}
            assert http.put("/ledgers/l", json={}, headers=auth).status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and b"warning" not in err
