"""The same stripe-python job, keyed by its op's id, on two Stripe sandboxes nobody here wrote:
localstripe ignores `Idempotency-Key` (a retry after the destination took the request leaves two
records), stripe-stateful-mock honours it (one). Judged from each sandbox's own records; and a
job that looks for its PaymentIntent before it sends, kept even by localstripe."""

from __future__ import annotations

import collections
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stripe

from labcore.procs import free_port
from tests.support.helpers import assert_left_nothing, run_testbed
from tests.support.sandboxes import Sandbox

pytestmark = pytest.mark.e2e

OPS = 20  # two faulted ops a cell: 20 / 0 kept, 22 / 0 duplicated
ROOT = Path(__file__).resolve().parents[2]
LOCALSTRIPE = str(Path(sys.executable).with_name("localstripe"))
# `npm ci` at the project's root installs it (package.json); .ci/run does.
STATEFUL_MOCK = ROOT / "node_modules" / "stripe-stateful-mock" / "dist" / "cli.js"


@pytest.fixture
def localstripe() -> Iterator[Sandbox]:
    # Its store is pickled to a fixed /tmp/localstripe.pickle (TMPDIR and cwd do not move it):
    # --from-scratch so that it never starts from another run's store; each run's op ids are its own.
    # The pickle is removed after only if this test made it: another localstripe may own it.
    pickle = Path("/tmp/localstripe.pickle")
    ours = not pickle.exists()
    port = free_port()
    server = Sandbox([LOCALSTRIPE, "--port", str(port), "--from-scratch"], port, {})
    yield server
    server.stop()
    if ours:
        pickle.unlink(missing_ok=True)


@pytest.fixture
def stateful_mock() -> Iterator[Sandbox]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: stripe-stateful-mock is an npm package")
    if not STATEFUL_MOCK.exists():
        pytest.skip("stripe-stateful-mock is not installed: run `npm ci` at the project's root")
    port = free_port()
    server = Sandbox([node, str(STATEFUL_MOCK)], port, {"PORT": str(port)})
    yield server
    server.stop()


def chaos(handler: str, reader: str, url: str, workdir: Path) -> list[str]:
    """One handler's row of the table, the run checked to have left nothing behind."""
    args = ["--handler", f"examples.stripe_payments:{handler}", "--destination", url, "--ops", str(OPS)]
    args += ["--destination-effect", "POST /v1/*", "--evidence", f"examples.stripe_payments:{reader}"]
    ran = run_testbed(args, workdir, timeout=600)
    lines = ran.stdout.splitlines()
    assert ran.code in (0, 1), ran.stderr
    assert_left_nothing(ran)
    return lines[lines.index("kill") + 2].split()[1:]


def test_localstripe_ignores_the_key_a_payment_intent_is_made_twice(workdir: Path, localstripe: Sandbox) -> None:
    row = chaos("payment_intent", "effects", localstripe.url, workdir)
    assert row == ["20", "/", "0", "20", "/", "0", "22", "/", "0", "!"]


def payment_intents_by_cell(url: str) -> collections.Counter[str]:
    """The PaymentIntents localstripe holds, read by the test itself, by cell id (the op ids' ledger)."""
    client = stripe.StripeClient("sk_test_testbed", base_addresses={"api": url})
    ops = [pi.metadata.to_dict()["op_id"] for pi in client.v1.payment_intents.list({"limit": 100}).auto_paging_iter()]
    return collections.Counter(op.partition(":")[0].rsplit(".", 1)[1] for op in ops)


def reconciled(boundary: str, fault: str, url: str, workdir: Path) -> dict[str, Any]:
    """`reconciled`'s one cell on localstripe: its row, its counts checked against the test's own read."""
    args = ["--handler", "examples.stripe_payments:reconciled", "--destination", url, "-b", boundary, "-f", fault]
    args += ["--ops", str(OPS), "--destination-effect", "POST /v1/*", "--evidence", "examples.stripe_payments:effects"]
    ran = run_testbed(args, workdir, timeout=600)
    assert ran.code in (0, 1), ran.stderr
    # The counts are localstripe's: what the test reads there itself.
    assert {r["cell"]: r["effects"] for r in ran.json["rows"]} == dict(payment_intents_by_cell(url))
    assert_left_nothing(ran)
    return ran.row("examples.stripe_payments:reconciled", boundary)


def test_a_job_that_looks_before_it_sends_is_kept_by_localstripe(workdir: Path, localstripe: Sandbox) -> None:
    # The key is ignored there: only the lookup keeps the killed op's retry from a second PaymentIntent.
    row = reconciled("after-effect", "kill", localstripe.url, workdir)
    assert (row["verdict"], row["effects"], row["missingOperations"], row["duplicateEffects"]) == ("pass", OPS, 0, 0)
    assert row["requests"] == OPS  # the killed ops' retries found their PaymentIntent and sent nothing


def test_its_lookup_misses_a_create_still_held_on_its_way(workdir: Path, localstripe: Sandbox) -> None:
    # `late`: the retry looks while the first create is held at the proxy, finds nothing, creates;
    # then the held one is forwarded. The race of reconciliation, two PaymentIntents each.
    row = reconciled("before-effect", "late", localstripe.url, workdir)
    assert (row["effects"], row["missingOperations"], row["duplicateEffects"]) == (OPS + 2, 0, 2)
    assert row["requests"] == OPS + 2


def test_the_same_job_is_kept_by_stripe_stateful_mock_and_not_by_localstripe(
    workdir: Path, localstripe: Sandbox, stateful_mock: Sandbox
) -> None:
    # stripe-stateful-mock 0.0.16 has no PaymentIntents: the same keyed job on Customers.
    assert chaos("customer", "customer_effects", localstripe.url, workdir)[6:] == ["22", "/", "0", "!"]
    assert chaos("customer", "customer_effects", stateful_mock.url, workdir) == ["20", "/", "0"] * 3


def test_the_stripe_sdks_own_boundaries_strike_in_the_work_horse(workdir: Path, localstripe: Sandbox) -> None:
    # stripe-python's create (over requests) passes before-request and after-receipt in the work-horse.
    args = ["--handler", "examples.stripe_payments:payment_intent", "--destination", localstripe.url]
    args += ["--ops", str(OPS), "--destination-effect", "POST /v1/*", "--evidence", "examples.stripe_payments:effects"]
    ran = run_testbed([*args, "-b", "before-request", "-b", "after-receipt"], workdir, timeout=600)
    assert ran.code == 1, ran.stderr  # localstripe ignores the key: the retry after the receipt was lost is a second
    rows = [(r["boundary"], r["kills"], r["requests"], r["effects"], r["missingOperations"]) for r in ran.json["rows"]]
    assert rows == [("before-request", 2, OPS, OPS, 0), ("after-receipt", 2, OPS + 2, OPS + 2, 0)]
    assert {r["cell"]: r["effects"] for r in ran.json["rows"]} == dict(payment_intents_by_cell(localstripe.url))
    assert_left_nothing(ran)
