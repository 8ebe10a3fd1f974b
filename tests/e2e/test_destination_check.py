"""`testbed check` of a run against a real destination judges it again from the destination's
own records, as its evidence reader answered in the run (destination-records.jsonl): the
same verdict from the files left as they are, another from a record taken out, and a file
cut short refused in one line."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcore.procs import free_port
from tests.support.helpers import Ran, RanIn, assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e

MOTO = str(Path(sys.executable).with_name("moto_server"))
RECORDS = "destination-records.jsonl"


@pytest.fixture(scope="module")
def destination_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RanIn]:
    """A keyed and a naive boto3 job on moto's SQS FIFO, the sandbox started by the lab, stored."""
    workdir = tmp_path_factory.mktemp("run")
    port = free_port()
    args = ["--handler", "examples.sqs_fifo:keyed", "--handler", "examples.sqs_fifo:naive", "--ops", "10"]
    args += ["-b", "none", "-b", "after-effect", "--destination", f"http://127.0.0.1:{port}"]
    args += ["--destination-command", f"{MOTO} -H 127.0.0.1 -p {port}", "--store", str(workdir / "runs")]
    args += ["--destination-effect", "X-Amz-Target: AmazonSQS.SendMessage", "--evidence", "examples.sqs_fifo:effects"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SQS_QUEUE", "stored-check.fifo")
        ran = run_testbed(args, workdir, timeout=300)
    assert ran.code == 1, ran.stderr  # the naive job duplicates at after-effect
    assert_left_nothing(ran)
    yield ran, workdir
    shutil.rmtree(workdir, ignore_errors=True)


def _stored(workdir: Path) -> Path:
    return (workdir / "runs" / "latest").resolve()


def _check(run: Path, workdir: Path) -> Ran:
    return run_testbed([str(run)], workdir, command="check")


def test_check_judges_the_stored_answers_again_and_says_so(destination_run: RanIn, tmp_path: Path) -> None:
    ran, workdir = destination_run
    checked = _check(_stored(workdir), tmp_path)
    assert checked.code == ran.code == 1, checked.stdout + checked.stderr
    assert "DIFFERS  examples.sqs_fifo:naive @ after-effect (kill): exactly-once: 1 op duplicated" in checked.stdout
    assert "2/4 cells as expected" not in checked.stdout and "3/4 cells as expected" in checked.stdout
    assert f"as its evidence reader answered in the run ({RECORDS})" in checked.stdout
    # The breach names the source of its counts: the queue, not the provider.
    held = r"held 2 records of it, from 2 requests the lab forwarded; 2 attempts; kill at after-effect on attempt 1"
    said = rf":10: duplicated: the destination 127\.0\.0\.1:\d+ \(read by examples\.sqs_fifo:effects\) {held}"
    assert re.search(said, ran.stdout) and re.search(said, checked.stdout), checked.stdout
    assert "the provider recorded" not in ran.stdout + checked.stdout
    # The keyed job's retried send reached the queue twice (the proxy forwarded both) and the
    # queue kept one: counted from the provider's log it would be a duplicate.
    keyed = next(
        r for r in ran.json["rows"] if r["strategy"] == "examples.sqs_fifo:keyed" and r["boundary"] == "after-effect"
    )
    assert keyed["effects"] == 10 and keyed["verdict"] == "pass"


def test_check_counts_what_the_stored_records_say(destination_run: RanIn, tmp_path: Path) -> None:
    _, workdir = destination_run
    run = tmp_path / "edited"
    shutil.copytree(_stored(workdir), run)
    lines = [json.loads(line) for line in (run / RECORDS).read_text().splitlines()]
    held = [ids for line in lines for ids in line["records"].values()]
    twice = next(ids for ids in held if len(ids) == 2)  # the naive job's duplicated op
    del twice[1]
    (run / RECORDS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert _check(run, tmp_path).code == 2  # an edit the run's digests tell
    (run / "digests.json").unlink()  # as a run stored before digests were kept: its files judged as they are
    checked = _check(run, tmp_path)
    assert checked.code == 0, checked.stdout + checked.stderr
    assert "testbed: warning:" in checked.stderr
    assert "4/4 cells as expected" in checked.stdout


def test_check_refuses_stored_records_cut_short(destination_run: RanIn, tmp_path: Path) -> None:
    _, workdir = destination_run
    run = tmp_path / "cut"
    shutil.copytree(_stored(workdir), run)
    lines = (run / RECORDS).read_text().splitlines(keepends=True)
    (run / RECORDS).write_text("".join(lines[:-1]))
    checked = _check(run, tmp_path)
    assert checked.code == 2
    (line,) = checked.stderr.strip().splitlines()
    said = rf"testbed: error: cut/{RECORDS} has the records of 0 of the 10 ops cell c00\d judged: it is cut short"
    assert re.fullmatch(said, line), line


def test_the_report_sets_what_the_lab_forwarded_beside_what_the_destination_holds(
    destination_run: RanIn, tmp_path: Path
) -> None:
    _, workdir = destination_run
    run = tmp_path / "reported"
    shutil.copytree(_stored(workdir), run)
    made = run_testbed([str(run)], tmp_path, command="report")
    assert made.code == 0, made.stderr
    page = (run / "report.html").read_text()
    said = re.findall(r'<details class="destination-cell" data-cell="c\d+"[^>]*><summary>([^<]*)</summary>', page)
    cells = dict(summary.split(": ", 1) for summary in said)
    assert len(cells) == 4
    at = "after-effect (kill)"
    assert cells[f"examples.sqs_fifo:keyed @ {at}"] == (
        "10 ops, 11 effects forwarded, 10 records at the destination; 1 op(s) where they differ"
    )
    assert cells[f"examples.sqs_fifo:naive @ {at}"] == (
        "10 ops, 11 effects forwarded, 11 records at the destination; 0 op(s) where they differ"
    )
    (row,) = re.findall(r'<tr class="destination-op" data-op="([^"]+)" data-finding="yes">(.*?)</tr>', page)
    assert row[0] == "tenant-demo:notification:10"
    assert re.sub(r"<[^>]+>", "|", row[1]).split("|")[1::2] == [
        "tenant-demo:notification:10",
        "#1: 1 effect, 1 read; #2: 1 effect, 1 read",
        "1",
        "the destination kept 1 of 2 forwarded effects (it deduplicated)",
    ]
