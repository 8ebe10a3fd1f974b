"""A job that charges an op with the official `stripe` SDK, and the Stripe sandbox's own records
as its judge (`pip install '.[destinations]'`; localstripe as the sandbox):

    localstripe --port 8420 --from-scratch &
    testbed chaos --handler examples.stripe_payments:payment_intent --destination http://127.0.0.1:8420 \\
        --evidence examples.stripe_payments:effects --destination-effect 'POST /v1/payment_intents*'

The job's code is what it would be in production but for its endpoint, which the lab gives
it in `TESTBED_DESTINATION_URL`. It sends an `Idempotency-Key` derived from the op's id, so a
retry after the destination took the first request is the same request again: whether that
leaves one PaymentIntent or two is the destination's to decide. localstripe ignores the key
(two); Stripe replays the first answer (one).

stripe-stateful-mock (npm 0.0.16) honours the key but has no PaymentIntents (`/v1/payment_intents`
answers 404), so `customer` is the same job on a resource both sandboxes have, with `customer_effects`
as its reader. Each record carries its op's id in its metadata, `op_id`, which is how the readers
tell them apart (neither sandbox filters a listing by metadata: the readers filter).

`reconciled` does not trust the key: every attempt first lists the PaymentIntents and looks for
one an earlier attempt of the op made, and sends only if there is none (localstripe has no
`/v1/payment_intents/search`: it answers 404, so it lists and filters, as the readers do).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import stripe

OP_METADATA = "op_id"
# A sandbox's: both take any test key.
API_KEY = "sk_test_testbed"
AMOUNT = 1000  # the same on every attempt: a key sent again with other parameters is refused
# `reconciled`'s client: a production job's bound on a call rather than the SDK's 80 s, and none
# of the SDK's own retries, which would send the create again without looking first.
CALL_TIMEOUT = 10.0


def _use(base_url: str) -> None:
    stripe.api_key = API_KEY
    stripe.api_base = base_url


def _key(op_id: str) -> str:
    """The op's idempotency key: at most 255 characters, whatever the op's id."""
    return hashlib.sha256(op_id.encode()).hexdigest()


def payment_intent(op_id: str, payload: dict[str, Any]) -> str:
    """A PaymentIntent for the op, keyed by the op's id."""
    _use(os.environ["TESTBED_DESTINATION_URL"])
    made = stripe.PaymentIntent.create(
        amount=AMOUNT, currency="usd", metadata={OP_METADATA: op_id}, idempotency_key=_key(op_id)
    )
    return str(made.id)


def customer(op_id: str, payload: dict[str, Any]) -> str:
    """A Customer for the op, keyed by the op's id: `payment_intent` on stripe-stateful-mock's resources."""
    _use(os.environ["TESTBED_DESTINATION_URL"])
    made = stripe.Customer.create(email=_email(op_id), metadata={OP_METADATA: op_id}, idempotency_key=_key(op_id))
    return str(made.id)


def reconciled(op_id: str, payload: dict[str, Any]) -> str:
    """`payment_intent`, looking before it sends: the PaymentIntent an earlier attempt of the op
    made, if the destination holds one, or a new one. A create still on its way when the lookup
    runs (`late`) is not there to be found: two."""
    client = stripe.StripeClient(
        API_KEY,
        base_addresses={"api": os.environ["TESTBED_DESTINATION_URL"]},
        max_network_retries=0,
        http_client=stripe.new_default_http_client(timeout=CALL_TIMEOUT),
    )
    made = _held(client.v1.payment_intents.list(params={"limit": 100}), [op_id]).get(op_id)
    if made:
        return made[0]
    new = client.v1.payment_intents.create(
        {"amount": AMOUNT, "currency": "usd", "metadata": {OP_METADATA: op_id}}, {"idempotency_key": _key(op_id)}
    )
    return str(new.id)


def _email(op_id: str) -> str:
    return f"{_key(op_id)}@testbed.invalid"


def _held(listing: Any, op_ids: list[str]) -> dict[str, list[str]]:
    """The record ids of a whole listing (every page), by the op id in their metadata."""
    wanted = set(op_ids)
    found: dict[str, list[str]] = {}
    for record in listing.auto_paging_iter():
        op = record.metadata.to_dict().get(OP_METADATA)
        if op in wanted:
            found.setdefault(op, []).append(str(record.id))
    return found


def effects(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    """The evidence: the PaymentIntents the destination holds for each op."""
    _use(destination_url)
    return _held(stripe.PaymentIntent.list(limit=100), op_ids)


def customer_effects(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    """The evidence for `customer`: the Customers the destination holds for each op, listed by the
    op's e-mail (stripe-stateful-mock 0.0.16 cannot page a listing: `starting_after` answers 404)."""
    _use(destination_url)
    found: dict[str, list[str]] = {}
    for op_id in op_ids:
        found.update(_held(stripe.Customer.list(email=_email(op_id), limit=100), [op_id]))
    return found
