"""A command line that explains itself and never wastes a run: each case here
failed once; now the error comes before anything starts, or the option does
what it says."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import TESTBED, Ran, SharedRedis, assert_left_nothing, redis_server, run_testbed

pytestmark = pytest.mark.e2e


def refused(ran: Ran, message: str) -> None:
    """One line, exit 2, nothing started, nothing written."""
    assert ran.code == 2, ran.stdout + ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed: error: ") and message in lines[0], ran.stderr
    assert ran.results is None
    assert_left_nothing(ran)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "."], "--json .: a directory, not a regular file"),
        (["--json", "/proc/results.json"], "not writable"),
        (["--json", "no/such/dir/results.json"], "directory no/such/dir does not exist"),
        (["--junit", "."], "--junit .: a directory, not a regular file"),
        # As root, /dev is writable: a rename there would replace the link, or the device, with a file.
        (["--json", "/dev/stdout"], "--json /dev/stdout: a link to a descriptor of the process (/proc/self/fd/1)"),
        (["--junit", "/dev/null"], "--junit /dev/null: a device, not a regular file"),
        (["--client-timeout", "nan"], "--client-timeout must be from 0.05 to 3,600 (got nan)"),
        (["--ops", "99999999999999999999999"], "--ops must be from 1 to 10,000,000"),
        (["--ops", "1000000"], "add --yes to run it"),
        # A faulted cell whose plan arms no op would pass without testing anything: refused.
        (["--ops", "1"], "arms no fault: retry-only @ before-effect (kill) would pass without testing its boundary"),
        (["--scenario", "withdrawn", "-s", "retry-only", "--ops", "1"], "arms no fault"),
        (["--expect", "retry-only@after-effect=-1/0"], "counts are whole numbers"),
        (["--expect", "retry-only@job-start=1/0"], "matches no cell of this run"),
        (["--expect", "retry-only@none=100/0", "--expect", "retry-only@none=99/0"], "given twice"),
        (
            [
                "-s",
                "retry-only",
                "-b",
                "after-effect",
                "-f",
                "kill",
                "-f",
                "timeout",
                "--expect",
                "retry-only@after-effect=1/0",
            ],
            "matches 2 cells",
        ),
        (["--matrix", "full", "--scenario", "duplicate-enqueue", "-f", "kill"], "runs with fault hold, not kill"),
        (["--no-store", "--report"], "--report writes into the stored run"),
    ],
)
def test_bad_input_costs_no_run(workdir: Path, args: list[str], message: str) -> None:
    started = time.monotonic()
    ran = run_testbed(args, workdir, timeout=60)
    refused(ran, message)
    assert time.monotonic() - started < 10  # before the stack starts: no Redis, no workers


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TESTBED, *args], capture_output=True, text=True, timeout=60, env=env)


def test_bare_testbed_lists_its_commands() -> None:
    ran = command()
    assert ran.returncode == 0
    for name in ("chaos", "replay", "load", "provider", "runs", "report", "check", "compare", "clean"):
        assert re.search(rf"^\s+{name}\s", ran.stdout, re.M), name
    assert "..." not in ran.stdout.split("Commands:")[1]  # no summary cut short


def test_short_help_and_version() -> None:
    assert command("-h").returncode == 0
    ran = command("--version")
    assert ran.returncode == 0 and re.fullmatch(r"testbed \S+\n", ran.stdout)


def test_help_lists_valid_values_and_examples() -> None:
    text = command("chaos", "-h").stdout
    assert "<list[str]>" not in text
    for value in ("provider-key", "after-effect", "kill-worker", "provider-crash", "lagging-listing"):
        assert value in text.replace("-\n", "-").replace(" ", "") or value in text
    assert "Examples:" in text and "testbed chaos --matrix full" in text


def test_the_full_matrix_runs_a_named_fault(workdir: Path) -> None:
    ran = run_testbed(["--matrix", "full", "-f", "kill-worker", "-s", "provider-key", "--ops", "10"], workdir)
    assert ran.code == 0, ran.stderr
    faults = {r["fault"] for r in ran.json["rows"]}
    assert faults == {"none", "kill-worker"}
    assert {r["boundary"] for r in ran.json["rows"] if r["fault"] == "kill-worker"} >= {"job-start", "after-record"}


def test_an_expectation_names_the_fault(workdir: Path) -> None:
    args = ["-s", "retry-only", "-b", "after-effect", "-f", "kill", "-f", "timeout", "--ops", "10"]
    ran = run_testbed([*args, "--expect", "retry-only@after-effect:timeout=10/0"], workdir)
    assert ran.code == 1
    assert "DIFFERS  retry-only @ after-effect (timeout): effects expected 10, observed 11" in ran.stdout
    assert "DIFFERS  retry-only @ after-effect (kill)" not in ran.stdout


def test_progress_lines_mark_cells_as_the_tables_do(workdir: Path) -> None:
    ran = run_testbed(
        ["--scenario", "stored-error", "-s", "provider-key", "-b", "after-effect", "--ops", "10"], workdir
    )
    assert ran.code == 0, ran.stderr
    assert "9 / 0 (1f)" in ran.stdout  # the table: the faulted op was declined, not lost
    progress = next(line for line in ran.stderr.splitlines() if line.startswith("[1/1]"))
    assert "9 / 0 (1f)" in progress and "as expected" in progress


def test_load_without_a_terminal_prints_no_empty_progress(workdir: Path) -> None:
    ran = run_testbed(["--ops", "50", "-s", "retry-only", "--kill-rate", "0.1"], workdir, command="load")
    assert ran.code == 0, ran.stderr
    assert "0m00s" not in ran.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "8.8.8.8", "--port", "0"], "--host 8.8.8.8: not an address of this machine"),
        (["--port", "99999"], "--port must be from 0 to 65,535 (got 99,999)"),
        (["--db", "."], "--db .: a directory, not a regular file"),
    ],
)
def test_provider_input_is_checked_up_front(workdir: Path, args: list[str], message: str) -> None:
    db = [] if "--db" in args else ["--db", str(workdir / "p.sqlite3")]
    ran = command("provider", *db, *args, env={**os.environ, "TESTBED_PROVIDER_TOKEN": "t"})
    assert ran.returncode == 2 and ran.stderr.strip() == f"testbed: error: {message}"
    assert not (workdir / "p.sqlite3").exists()


def test_provider_on_port_0_names_its_port_logs_requests_and_lists_its_log(workdir: Path) -> None:
    env = {**os.environ, "TESTBED_PROVIDER_TOKEN": "secret-token"}
    argv = [*TESTBED, "provider", "--db", str(workdir / "p.sqlite3"), "--port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        serving = re.search(r"serving (http://127\.0\.0\.1:\d+)", line)
        assert serving is not None, line
        url = serving.group(1)
        auth = {"Authorization": "Bearer secret-token"}
        with httpx.Client(base_url=url, headers=auth, trust_env=False) as http:
            for _ in range(100):
                try:
                    http.get("/health")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            http.put("/ledgers/l", json={})
            for n in range(3):
                http.post("/ledgers/l/effects", json={"reference": f"op-{n}", "recipient": "a@b.c", "message": "m"})
            page = http.get("/ledgers/l/log", params={"limit": 2}).json()
            assert [e["reference"] for e in page["effects"]] == ["op-0", "op-1"]
            rest = http.get("/ledgers/l/log", params={"after": page["next"]}).json()
            assert [e["reference"] for e in rest["effects"]] == ["op-2"] and rest["next"] is None
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    assert '"POST /ledgers/l/effects HTTP/1.1" 201' in out  # the access log
    assert "secret-token" not in line + out + err


@pytest.fixture
def shared_redis(tmp_path: Path) -> Iterator[SharedRedis]:
    with redis_server(tmp_path, password="pw-of-the-user") as server:
        yield server


def test_clean_removes_a_dead_runs_keys_and_never_a_live_ones(workdir: Path, shared_redis: SharedRedis) -> None:
    url, client = shared_redis
    client.set("testbed:20260101-000000-dead00:cell:c001:ops", "x")  # a run that died: no owner key
    client.set("testbed:20260101-000000-live00:owner", json.dumps({"pid": 1}), ex=60)
    client.set("testbed:20260101-000000-live00:cell:c001:ops", "x")
    client.set("someone-elses:key", "untouched")
    ran = command("clean", "--redis-url", url)
    assert ran.returncode == 0, ran.stderr
    assert "removed 1 key(s) under testbed:20260101-000000-dead00" in ran.stdout
    assert "pw-of-the-user" not in ran.stdout + ran.stderr
    assert client.exists("testbed:20260101-000000-live00:cell:c001:ops") and client.get("someone-elses:key")
    assert not client.exists("testbed:20260101-000000-dead00:cell:c001:ops")


def test_a_password_is_never_printed(workdir: Path) -> None:
    ran = run_testbed(
        ["--redis-url", "redis://:hunter2@127.0.0.1:1/0", "--ops", "5", "--every", "5"], workdir, timeout=60
    )
    assert ran.code == 2 and "hunter2" not in ran.stderr and "***" in ran.stderr


def test_a_killed_runs_temp_dir_and_a_kept_one_go_with_clean(workdir: Path) -> None:
    kept = run_testbed(["--ops", "5", "-s", "retry-only", "-b", "none", "--keep"], workdir)
    assert kept.code == 0
    left = list(kept.tmpdir.iterdir())
    assert len(left) == 1  # kept on purpose: the next run leaves it
    again = run_testbed(["--ops", "5", "-s", "retry-only", "-b", "none"], workdir)
    assert list(again.tmpdir.iterdir()) == left
    cleaned = subprocess.run(
        [*TESTBED, "clean"], capture_output=True, text=True, env={**os.environ, "TMPDIR": str(kept.tmpdir)}
    )
    assert cleaned.returncode == 0 and f"removed {left[0]}" in cleaned.stdout
    assert list(kept.tmpdir.iterdir()) == []


def test_ctrl_c_in_load_leaves_the_message_on_its_own_line(workdir: Path) -> None:
    from tests.support.helpers import finish, start_testbed

    proc, _, err = start_testbed(["--ops", "3000", "-s", "retry-only"], workdir, command="load")
    deadline = time.monotonic() + 60
    while "load" not in err.read_text() and "testbed run" not in err.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    ran = finish(proc, workdir, timeout=60)
    assert ran.code == 130
    assert ran.stderr.splitlines()[-1] == "testbed: error: interrupted; everything the run started has been stopped"
    assert_left_nothing(ran)
    assert sys.executable  # the run used this interpreter
