"""E-mail as the destination: smtplib jobs through the lab's SMTP relay to maildev (npm), which
the lab starts with the run, under the kills at the end of DATA, judged from maildev's
listing; the test reads maildev's own store of what it received and compares."""

from __future__ import annotations

import collections
import email
import email.policy
import shutil
from pathlib import Path

import pytest

from labcore.procs import free_port
from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e

OPS = 10  # one faulted op a cell: 10 / 0 kept, 11 / 0 duplicated
MAILDEV = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "maildev"
JOBS = "examples.smtp_mail"


def held(store: Path) -> dict[str, list[str]]:
    """The Message-IDs of what maildev received, read by the test from maildev's own store
    (one file a message), by cell id (the op ids' ledger)."""
    by_cell: dict[str, list[str]] = collections.defaultdict(list)
    for path in store.glob("*.eml"):
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        cell = str(message["X-Op-Id"]).partition(":")[0].rsplit(".", 1)[1]
        by_cell[cell].append(str(message["Message-ID"]))
    return by_cell


def test_a_mailbox_holds_two_copies_at_after_effect_the_keyed_ones_under_one_message_id(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("node") is None or not MAILDEV.exists():
        pytest.skip("maildev is not installed: run `npm ci` at the project's root (it needs node)")
    web, store = free_port(), workdir / "mailbox"
    monkeypatch.setenv("MAILDEV_URL", f"http://127.0.0.1:{web}")  # for the lab's reader
    command = f"{MAILDEV} -s {{port}} -w {web} --ip 127.0.0.1 --web-ip 127.0.0.1 --mail-directory {store}"
    args = ["--handler", f"{JOBS}:keyed", "--handler", f"{JOBS}:naive", "--ops", str(OPS), "-f", "kill"]
    args += ["-b", "before-effect", "-b", "after-effect", "--destination", "smtp://127.0.0.1:{port}"]
    args += ["--destination-command", command, "--evidence", f"{JOBS}:effects"]
    ran = run_testbed(args, workdir, timeout=300)
    assert ran.code == 1, ran.stderr  # an SMTP server does not deduplicate: both duplicate
    lines = ran.stdout.splitlines()
    table = {line.split()[0]: line.split()[1:] for line in lines[lines.index("kill") + 2 :][:2]}
    assert table[f"{JOBS}:keyed"] == table[f"{JOBS}:naive"] == ["10", "/", "0", "11", "/", "0", "!"]
    # The counts are the mailbox's: what the test reads in maildev's store itself.
    received = held(store)
    assert {row["cell"]: row["effects"] for row in ran.json["rows"]} == {c: len(m) for c, m in received.items()}
    keyed, naive = ran.row(f"{JOBS}:keyed", "after-effect"), ran.row(f"{JOBS}:naive", "after-effect")
    assert keyed["requests"] == naive["requests"] == OPS + 1  # the retry's message was relayed again
    # What tells the two apart: the keyed job's two copies carry one Message-ID, which a reader can drop.
    assert len(set(received[keyed["cell"]])) == OPS and len(set(received[naive["cell"]])) == OPS + 1
    before = ran.row(f"{JOBS}:keyed", "before-effect")
    assert before["requests"] == OPS + 1 and before["effects"] == OPS  # the held message was never passed on
    assert_left_nothing(ran)


@pytest.mark.parametrize(
    ("command", "args", "said"),
    [
        ("chaos", ["-b", "before-request"], "before-request at an smtp:// destination"),
        ("chaos", ["-b", "after-receipt"], "after-receipt at an smtp:// destination"),
        ("load", ["-b", "after-receipt"], "after-receipt at an smtp:// destination"),
        ("explore", [], "explore at an smtp:// destination: not in this version"),
    ],
)
def test_what_never_strikes_at_a_mail_destination_is_refused_before_any_work(
    workdir: Path, command: str, args: list[str], said: str
) -> None:
    """The job's mail client is not instrumented: a kill at its boundaries would never strike."""
    url = f"smtp://127.0.0.1:{free_port()}"  # nothing listens: refused before the lab would look
    ran = run_testbed(
        ["--handler", f"{JOBS}:keyed", "--destination", url, "--evidence", f"{JOBS}:effects", *args],
        workdir,
        timeout=60,
        command=command,
    )
    assert ran.code == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"testbed: error: {said}"), lines
    assert ran.results is None
    assert_left_nothing(ran)
