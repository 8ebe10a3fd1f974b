"""Two jobs that send an op's message to an SQS FIFO queue with boto3, and the queue's own
records as their judge (`pip install '.[destinations]'`; moto's server as the sandbox):

    moto_server -H 127.0.0.1 -p 5000 &
    testbed chaos --handler examples.sqs_fifo:keyed --destination http://127.0.0.1:5000 \\
        --evidence examples.sqs_fifo:effects --destination-effect 'X-Amz-Target: AmazonSQS.SendMessage'

The job's code is what it would be in production but for its endpoint, which the lab
gives it in `TESTBED_DESTINATION_URL`. `keyed` sends with the op's id as
`MessageDeduplicationId`, which SQS FIFO deduplicates for five minutes: a retry after
the queue took the message leaves one. `naive` sends a fresh id per attempt: a retry
after the queue took it, with the worker killed before its answer, leaves two.

The queue's name is `$SQS_QUEUE` (by default testbed.fifo); each message carries its
op's id as the message attribute `op_id`, which is how the reader tells them apart.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from typing import Any

import boto3

QUEUE = os.environ.get("SQS_QUEUE", "testbed.fifo")
OP_ATTRIBUTE = "op_id"
# A sandbox's: moto takes any credentials in any region.
_SANDBOX = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
_HOLD_SECONDS = 30  # how long the reader keeps a message it has read from everyone else
_READS, _AGAIN_SECONDS = 20, 0.25  # another reader gives its messages back as soon as it has read them


def client(endpoint: str) -> Any:
    return boto3.client("sqs", endpoint_url=endpoint, **_SANDBOX)


def _queue_url(sqs: Any) -> str:
    """The queue, made if it is not there yet (CreateQueue with the same attributes is a no-op)."""
    return str(sqs.create_queue(QueueName=QUEUE, Attributes={"FifoQueue": "true"})["QueueUrl"])


def _id(text: str) -> str:
    """A deduplication or group id: at most 128 characters, whatever the op's id."""
    return hashlib.sha256(text.encode()).hexdigest()


def _send(op_id: str, payload: dict[str, Any], group: str, deduplication: str) -> str:
    sqs = client(os.environ["TESTBED_DESTINATION_URL"])
    sent = sqs.send_message(
        QueueUrl=_queue_url(sqs),
        MessageBody=str(payload),
        MessageGroupId=group,
        MessageDeduplicationId=deduplication,
        MessageAttributes={OP_ATTRIBUTE: {"DataType": "String", "StringValue": op_id}},
    )
    return str(sent["MessageId"])


def keyed(op_id: str, payload: dict[str, Any]) -> str:
    """The op's identity as the deduplication id: the queue keeps one message per op (its
    deduplication is queue-wide, whatever the group) for five minutes. Each send has a group
    of its own, so that the reader sees every message the queue holds: a FIFO queue hands
    out a group's next message only once the one before it is deleted, and the reader
    deletes nothing."""
    return _send(op_id, payload, uuid.uuid4().hex, _id(op_id))


def naive(op_id: str, payload: dict[str, Any]) -> str:
    """A fresh id per attempt (and a group of its own, to spread the load): every send is a message."""
    fresh = uuid.uuid4().hex
    return _send(op_id, payload, fresh, fresh)


def effects(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    """The evidence: the message ids the queue holds for each op, read from the queue itself.

    Every message is received (so held from other consumers for a while), then made visible
    again. SQS FIFO does not hand out a second message of a group while the first is held,
    and another cell's reader may hold some of them for the moment it reads them: while the
    queue holds more messages than could be read, this reads again, and raises rather than
    undercount if that does not pass."""
    sqs = client(destination_url)
    try:
        url = str(sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"])
    except sqs.exceptions.QueueDoesNotExist:
        return {}
    for _ in range(_READS):
        read, held = _read_all(sqs, url)
        if held == len(read):
            break
        time.sleep(_AGAIN_SECONDS)
    else:
        raise RuntimeError(f"{QUEUE} holds {held} messages and {len(read)} could be read")
    wanted = set(op_ids)
    found: dict[str, list[str]] = {}
    for message_id, op in read.items():
        if op in wanted:
            found.setdefault(op, []).append(message_id)
    return found


def _read_all(sqs: Any, url: str) -> tuple[dict[str, str], int]:
    """Every message that could be read (message id -> op id), made visible again at once,
    and how many the queue says it holds."""
    read: dict[str, str] = {}
    handles: list[str] = []
    try:
        while True:
            got = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=_HOLD_SECONDS,
                MessageAttributeNames=[OP_ATTRIBUTE],
            ).get("Messages", [])
            if not got:
                break
            for message in got:
                attribute = message.get("MessageAttributes", {}).get(OP_ATTRIBUTE, {})
                read[message["MessageId"]] = attribute.get("StringValue")
                handles.append(message["ReceiptHandle"])
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return read, sum(int(counts.get(name, 0)) for name in names)
    finally:
        for start in range(0, len(handles), 10):
            batch = handles[start : start + 10]
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(batch)]
            sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
