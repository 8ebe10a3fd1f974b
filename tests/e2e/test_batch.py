"""The work-horse's round trip (workers/batch.py) answers as a pipeline would, on a real Redis."""

import pytest
import redis

from workers.batch import batch

pytestmark = pytest.mark.e2e


def test_replies_in_order_as_a_pipeline_gives_them(private_redis: redis.Redis) -> None:
    commands: list[tuple[str | int, ...]] = [
        ("HINCRBY", "attempts", "op-1", 1),
        ("HSET", "ledger", "op-1", "done"),
        ("HGET", "ledger", "op-1"),
    ]
    commands += [("HGET", "ledger", "op-2"), ("INCR", "ended")]
    replies = batch(private_redis, *commands)
    with private_redis.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves Pipeline.execute_command unannotated
        expected = pipe.execute()
    # The second run of the same commands: counters moved on, the hash field already there.
    assert replies == [1, 1, b"done", None, 1]
    assert expected == [2, 0, b"done", None, 2]


def test_an_error_reply_is_raised_and_leaves_no_reply_behind(private_redis: redis.Redis) -> None:
    private_redis.set("plain", "x")
    with pytest.raises(redis.ResponseError):
        batch(private_redis, ("HGET", "plain", "f"), ("INCR", "after"))
    # The connection with the unread reply was dropped: the next batch reads its own replies.
    assert batch(private_redis, ("GET", "plain"), ("GET", "after")) == [b"x", b"1"]


def test_a_connection_the_server_closed_is_replaced_before_the_batch_is_sent(private_redis: redis.Redis) -> None:
    assert batch(private_redis, ("INCR", "n")) == [1]
    pool = private_redis.connection_pool
    other = redis.Redis(connection_pool=redis.ConnectionPool(pool.connection_class, **pool.connection_kwargs))
    assert other.client_kill_filter(_type="normal", skipme=True) == 1
    other.close()
    assert batch(private_redis, ("INCR", "n"), ("GET", "n")) == [2, b"2"]
