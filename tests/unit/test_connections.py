"""The lab's Redis clients name redis-py and its version without reading the package's metadata."""

import importlib.metadata

import pytest
import redis

from labcore import connections
from labcore.bounds import PAUSE_BOUND

if not hasattr(redis, "DriverInfo"):  # an older redis-py reads its version once, at import
    pytest.skip("this redis-py has no DriverInfo", allow_module_level=True)

URL = "redis://127.0.0.1:1/0"  # never reached: a connection is named when it is made, before it connects


def named(client: redis.Redis) -> tuple[object, object]:
    # redis-py types make_connection() as its ConnectionInterface, which leaves out the driver_info every
    # connection it makes has.
    info = client.connection_pool.make_connection().driver_info  # type: ignore[attr-defined]
    return info.formatted_name, info.lib_version


def test_a_lab_client_names_the_installed_redis_py_without_reading_its_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = importlib.metadata.version("redis")

    def unread(name: str) -> str:
        raise AssertionError(f"{name}'s metadata was read")

    monkeypatch.setattr(importlib.metadata, "version", unread)
    assert named(connections.from_url(URL)) == ("redis-py", installed)


def test_a_client_that_names_itself_keeps_its_name() -> None:
    mine = redis.DriverInfo(name="mine", lib_version="1.2")
    assert named(connections.from_url(URL, driver_info=mine)) == ("mine", "1.2")
    settings = {"lib_name": "theirs"}
    connections.name(settings)
    assert settings == {"lib_name": "theirs"}


def test_a_url_for_rq_asks_for_the_pause_bound_unless_it_names_a_timeout() -> None:
    url = connections.waiting_url("unix://:pw@/run/redis.sock?db=0")
    kwargs = redis.Redis.from_url(url).connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["db"], kwargs["password"]) == (PAUSE_BOUND, 0, "pw")
    assert connections.waiting_url("redis://h:1/0?socket_timeout=3") == "redis://h:1/0?socket_timeout=3"


def test_a_lab_client_waits_out_a_pause_longer_than_redis_pys_default() -> None:
    kwargs = connections.from_url("redis://127.0.0.1:1/0").connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == PAUSE_BOUND > 5
