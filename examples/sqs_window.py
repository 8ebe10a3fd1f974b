"""moto's server with its SQS clock moved past the FIFO deduplication window at every
message it is sent: the five minutes SQS keeps a `MessageDeduplicationId`, passed between
an attempt and its retry, without a test that waits five minutes.

    testbed chaos --handler examples.sqs_fifo:keyed --evidence examples.sqs_fifo:effects \\
        --destination-command 'python -m examples.sqs_window -H 127.0.0.1 -p {port}' \\
        --destination-effect 'X-Amz-Target: AmazonSQS.SendMessage'

moto 5's server has no endpoint that moves its clock (`/moto-api/` resets, seeds and
configures, but sets no time) and keeps the window as a constant of its SQS model
(`DEDUPLICATION_TIME_IN_SECONDS`), compared against each message's `SentTimestamp`. So
this runs moto's own server and its own deduplication, with one change: each message is
stamped one window and a second later than the one before it, as if the queue's clock had
moved that far between two sends. Everything else is moto's, unchanged.
"""

from __future__ import annotations

import itertools

from moto.server import main
from moto.sqs import models

PAST_WINDOW_MS = (models.DEDUPLICATION_TIME_IN_SECONDS + 1) * 1000
_sent = itertools.count(1)
_mark_sent = models.Message.mark_sent


def _mark_sent_later(self: models.Message, delay_seconds: int | None = None) -> None:
    _mark_sent(self, delay_seconds)
    self.sent_timestamp += next(_sent) * PAST_WINDOW_MS


if __name__ == "__main__":
    models.Message.mark_sent = _mark_sent_later  # type: ignore[method-assign]
    main()
