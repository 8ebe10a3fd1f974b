"""An op's intent on the wire (labcore.intent): what the run stores, every attempt reads back."""

from labcore.intent import OpIntent
from testbed.experiment.workload import make_op

PAYLOAD = {"recipient": "user-7@example.test", "message": "Your order #7 has shipped."}


def test_the_bytes_stay_as_they_were() -> None:
    # The form every stored run and every worker so far has read.
    assert OpIntent(7, "tenant-demo:notification:7", PAYLOAD).encode() == (
        '{"seq": 7, "intent": "tenant-demo:notification:7", "payload": '
        '{"recipient": "user-7@example.test", "message": "Your order #7 has shipped."}}'
    )


def test_an_intent_reads_back_as_it_was_written() -> None:
    intent = OpIntent(7, "tenant-demo:notification:7", PAYLOAD)
    assert OpIntent.decode(intent.encode()) == intent
    assert OpIntent.decode(intent.encode().encode()) == intent  # as Redis hands it back


def test_the_workload_stores_its_ops_in_this_form() -> None:
    op = make_op(12, seed=3)
    assert OpIntent.decode(op.encode()) == OpIntent(op.seq, op.intent, op.payload)
