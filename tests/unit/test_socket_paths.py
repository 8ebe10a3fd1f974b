"""Where a run's private Redis and provider can take a unix socket: a path the kernel accepts."""

from pathlib import Path

from testbed.infra.redis_server import MAX_SOCKET_PATH, socket_fits


def test_a_socket_path_is_measured_in_bytes_not_characters() -> None:
    short = Path("/tmp") / ("a" * 60)
    multibyte = Path("/tmp") / ("é" * 60)  # 60 characters, 120 bytes: the kernel would refuse it
    assert len(str(multibyte)) < MAX_SOCKET_PATH
    assert socket_fits(short)
    assert not socket_fits(multibyte)
