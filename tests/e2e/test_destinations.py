"""A real destination behind the lab: boto3 jobs on moto's SQS FIFO, through the provider's
proxy, under the kills, judged from the queue's own records; and what ends such a run."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.sqs_fifo import OP_ATTRIBUTE, client
from labcore.procs import free_port
from tests.support.helpers import assert_left_nothing, finish, run_testbed, start_testbed
from tests.support.sandboxes import Sandbox

pytestmark = pytest.mark.e2e

OPS = 20  # two faulted ops a cell: 20 / 0 kept, 22 / 0 duplicated
SQS = ["--destination-effect", "X-Amz-Target: AmazonSQS.SendMessage", "--evidence", "examples.sqs_fifo:effects"]
MOTO = str(Path(sys.executable).with_name("moto_server"))


def moto_server(*program: str) -> Sandbox:
    """moto's server (or `program`, which takes its options), as the sandbox a user would start."""
    port = free_port()
    return Sandbox([*(program or (MOTO,)), "-H", "127.0.0.1", "-p", str(port)], port, {})


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    monkeypatch.setenv("SQS_QUEUE", f"{request.node.name[:60].replace('[', '-').replace(']', '')}.fifo")
    server = moto_server(*getattr(request, "param", ()))
    yield server
    server.stop()


def queue_messages(url: str) -> collections.Counter[str]:
    """The messages the queue holds, read by the test itself, by cell id (the op ids' ledger)."""
    sqs = client(url)
    queue = sqs.get_queue_url(QueueName=os.environ["SQS_QUEUE"])["QueueUrl"]
    seen: dict[str, str] = {}
    while got := sqs.receive_message(
        QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=60, MessageAttributeNames=[OP_ATTRIBUTE]
    ).get("Messages", []):
        for message in got:
            seen[message["MessageId"]] = message["MessageAttributes"][OP_ATTRIBUTE]["StringValue"]
    return collections.Counter(op.partition(":")[0].rsplit(".", 1)[1] for op in seen.values())


def test_the_queue_judges_a_keyed_and_a_naive_boto3_job(workdir: Path, moto: Sandbox) -> None:
    handlers = ["--handler", "examples.sqs_fifo:keyed", "--handler", "examples.sqs_fifo:naive"]
    ran = run_testbed([*handlers, "--destination", moto.url, *SQS, "--ops", str(OPS)], workdir, timeout=600)
    assert ran.code == 1, ran.stderr  # the naive job duplicates: its promise is broken
    lines = ran.stdout.splitlines()
    table = {line.split()[0]: line.split()[1:] for line in lines[lines.index("kill") + 2 :][:2]}
    assert table["examples.sqs_fifo:keyed"] == ["20", "/", "0"] * 3
    assert table["examples.sqs_fifo:naive"] == ["20", "/", "0", "20", "/", "0", "22", "/", "0", "!"]
    # The counts are the queue's: what the test reads there itself.
    held = queue_messages(moto.url)
    assert {row["cell"]: row["effects"] for row in ran.json["rows"]} == dict(held)
    after = ran.row("examples.sqs_fifo:naive", "after-effect")
    assert after["duplicateEffects"] == 2 and after["requests"] == OPS + 2
    assert ran.json["options"]["destination"] == {
        "url": moto.url,
        "effects": ["x-amz-target: AmazonSQS.SendMessage"],
    }
    assert_left_nothing(ran)
    assert moto.proc.poll() is None  # a destination the user started is never stopped by the lab


def test_the_sdks_own_boundaries_strike_in_the_work_horse(workdir: Path, moto: Sandbox) -> None:
    # boto3's SendMessage passes before-request and after-receipt in the work-horse: a kill at the first
    # sent nothing (neither the lab nor the queue saw it), at the second the queue has the message.
    handlers = ["--handler", "examples.sqs_fifo:keyed", "--handler", "examples.sqs_fifo:naive"]
    args = [*handlers, "--destination", moto.url, *SQS, "--ops", str(OPS)]
    ran = run_testbed([*args, "-b", "before-request", "-b", "after-receipt"], workdir, timeout=600)
    assert ran.code == 1, ran.stderr  # the naive job duplicates at after-receipt
    lines = ran.stdout.splitlines()
    table = {line.split()[0]: line.split()[1:] for line in lines[lines.index("kill") + 2 :][:2]}
    assert table["examples.sqs_fifo:keyed"] == ["20", "/", "0"] * 2
    assert table["examples.sqs_fifo:naive"] == ["20", "/", "0", "22", "/", "0", "!"]
    held = queue_messages(moto.url)  # the counts are the queue's
    assert {row["cell"]: row["effects"] for row in ran.json["rows"]} == dict(held)
    for handler in ("examples.sqs_fifo:keyed", "examples.sqs_fifo:naive"):
        before, after = ran.row(handler, "before-request"), ran.row(handler, "after-receipt")
        assert before["kills"] == after["kills"] == 2
        # The killed attempts' sends never reached the proxy at before-request; at after-receipt they did.
        assert (before["requests"], after["requests"]) == (OPS, OPS + 2)
    assert_left_nothing(ran)


@pytest.mark.parametrize("moto", [(sys.executable, "-m", "examples.sqs_window")], indirect=True, ids=["past-window"])
def test_a_keyed_retry_past_the_deduplication_window_is_a_second_message(workdir: Path, moto: Sandbox) -> None:
    # moto's server whose queue clock moves one window on at every message: the keyed job's retry
    # after the queue took its first send comes past the five minutes, and the queue keeps both.
    args = ["--handler", "examples.sqs_fifo:keyed", "--destination", moto.url, *SQS, "--ops", str(OPS)]
    ran = run_testbed([*args, "-b", "none", "-b", "after-effect"], workdir, timeout=600)
    assert ran.code == 1, ran.stderr  # exactly-once is broken: the window is the queue's, not forever
    assert [(row["boundary"], row["effects"], row["duplicateEffects"]) for row in ran.json["rows"]] == [
        ("none", OPS, 0),
        ("after-effect", OPS + 2, 2),
    ]
    held = queue_messages(moto.url)  # the counts are the queue's
    assert {row["cell"]: row["effects"] for row in ran.json["rows"]} == dict(held)
    assert_left_nothing(ran)


def test_a_destination_that_does_not_answer_is_refused_before_anything_starts(workdir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    ran = run_testbed(["--handler", "examples.sqs_fifo:keyed", "--destination", url, *SQS], workdir, timeout=60)
    assert ran.code == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"testbed: error: --destination {url} does not answer"), lines
    assert ran.results is None
    assert_left_nothing(ran)


def test_a_reader_that_raises_ends_the_run_naming_it(workdir: Path, moto: Sandbox) -> None:
    args = ["--handler", "examples.sqs_fifo:keyed", "--destination", moto.url, "-b", "none", "--ops", "3"]
    args += ["--evidence", "tests.support.readers:raises"]
    ran = run_testbed(args, workdir, timeout=300)
    assert ran.code == 3, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("testbed: error: ")]
    named = "testbed: error: the evidence reader tests.support.readers:raises failed: RuntimeError: the sandbox is down"
    assert len(lines) == 1 and lines[0].startswith(f"{named} (0 cell(s) judged"), ran.stderr
    assert ran.json["rows"] == []  # nothing is scored
    assert_left_nothing(ran)


def test_a_destination_that_dies_mid_run_ends_it_naming_it(workdir: Path, moto: Sandbox) -> None:
    args = ["--handler", "examples.sqs_fifo:keyed", "--destination", moto.url, *SQS, "--ops", "5", "--every", "5"]
    args += ["--parallel", "1"]
    proc, out, err = start_testbed([*args, "-b", "none", "-b", "after-effect"], workdir)
    deadline = time.monotonic() + 300
    while "[1/2]" not in out.read_text() + err.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    moto.stop()  # once the first cell is judged
    ran = finish(proc, workdir, 300)
    assert ran.code == 3, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("testbed: error: ")]
    assert len(lines) == 1 and lines[0].startswith(f"testbed: error: the destination {moto.url} stopped answering")
    assert [row["cell"] for row in ran.json["rows"]] == ["c001"]  # the cell judged before is kept
    assert_left_nothing(ran)


@pytest.mark.parametrize("command", ["replay", "load", "explore"])
def test_every_front_end_refuses_a_destination_that_does_not_answer(workdir: Path, command: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    args = ["--handler", "examples.sqs_fifo:keyed", "--destination", url, *SQS]
    ran = run_testbed(args, workdir, timeout=60, command=command)
    assert ran.code == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"testbed: error: --destination {url} does not answer"), lines
    assert ran.results is None
    assert_left_nothing(ran)


PLUGIN_TESTS = """\
import os

import pytest

from examples.sqs_fifo import client
from testbed.errors import SetupError

SQS = {
    "destination": os.environ["MOTO_URL"],
    "evidence": "examples.sqs_fifo:effects",
    "destination_effects": ["X-Amz-Target: AmazonSQS.SendMessage"],
}


def held():
    sqs = client(os.environ["MOTO_URL"])
    queue = sqs.get_queue_url(QueueName=os.environ["SQS_QUEUE"])["QueueUrl"]
    seen = set()
    while got := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=60).get("Messages"):
        seen |= {m["MessageId"] for m in got}
    return len(seen)


def test_the_queue_judges_a_keyed_and_a_naive_job(lab):
    rows = lab.run(["examples.sqs_fifo:keyed", "examples.sqs_fifo:naive"], boundaries=["after-effect"], ops=10, **SQS)
    assert rows.row("after-effect", handler="examples.sqs_fifo:keyed").counts.duplicate_effects == 0
    assert rows.row("after-effect", handler="examples.sqs_fifo:naive").counts.duplicate_effects == 1
    assert sum(row.counts.effects for row in rows) == held() == 21  # the queue's own count


def test_a_destination_that_does_not_answer_is_refused(lab):
    with pytest.raises(SetupError, match="--destination http://127.0.0.1:9 does not answer"):
        lab.run("examples.sqs_fifo:keyed", **{**SQS, "destination": "http://127.0.0.1:9"})
    with pytest.raises(SetupError, match="--destination http://127.0.0.1:9 does not answer"):
        lab.explore("examples.sqs_fifo:keyed", **{**SQS, "destination": "http://127.0.0.1:9"})
"""


def test_the_plugin_puts_a_boto3_job_under_the_kills_against_the_queue(tmp_path: Path, moto: Sandbox) -> None:
    """`lab.run(..., destination=..., evidence=...)` in a user's own pytest run, as `testbed chaos` does."""
    from tests.e2e.test_plugin import ROOT, _plugin_args

    (tmp_path / "test_queue.py").write_text(PLUGIN_TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env |= {"MOTO_URL": moto.url}
    env.pop("RQ_KEY_PREFIX", None)  # this session's: the user's run claims its own
    argv = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q", "test_queue.py"]
    ran = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 passed" in ran.stdout
