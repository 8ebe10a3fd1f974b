"""The zygote's wire (workers/zygote.py): each message as one line, read back as it was written."""

import pytest

from workers.zygote import Exited, Fork, Forked, decode_fork, decode_reply, encode


def test_a_fork_request_is_one_line_read_back_whole() -> None:
    request = Fork("w1", ["--name", "w1", "--worker-ttl", "420", "testbed"], "/tmp/run dir/w1.log")
    line = encode(request)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_fork(line) == request


@pytest.mark.parametrize("reply", [Forked(4242), Exited(4242, 0), Exited(4243, -9), Exited(4244, 1)])
def test_replies_are_read_back_as_their_own_kind(reply: Forked | Exited) -> None:
    line = encode(reply)
    assert line.count(b"\n") == 1
    assert decode_reply(line) == reply
