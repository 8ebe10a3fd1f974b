"""The Redis connection each work-horse opens: it names redis-py and its version, read once per worker.

A forked child starts a fresh connection pool (redis-py checks the pid), so
every work-horse connects anew; the child here is forked from a worker of
the lab's class as RQ forks one, on a real Redis. What a connection sends
with CLIENT SETINFO is its `driver_info` (this project's Redis servers
predate the command, and ignore it).
"""

import importlib.metadata

import pytest
import redis
from rq import Queue

from tests.support.helpers import horse
from workers.worker import Worker

pytestmark = pytest.mark.e2e
if not hasattr(redis, "DriverInfo"):  # an older redis-py reads its version once, at import
    pytest.skip("this redis-py has no DriverInfo", allow_module_level=True)


def announced(client: redis.Redis) -> tuple[object, object]:
    assert client.ping()  # the connection is made, and works
    connection = client.connection_pool.get_connection()
    try:
        assert connection.driver_info is not None
        return connection.driver_info.formatted_name, connection.driver_info.lib_version
    finally:
        client.connection_pool.release(connection)


def test_a_work_horse_s_connection_names_redis_py_without_reading_its_metadata(private_redis: redis.Redis) -> None:
    worker = Worker([Queue("q", connection=private_redis)], connection=private_redis)

    def connect() -> None:
        def unread(distribution_name: str) -> str:
            raise AssertionError(f"the work-horse read {distribution_name}'s metadata")

        importlib.metadata.version = unread  # the child's own copy of the module
        assert announced(worker.connection) == ("redis-py", redis.__version__)

    assert horse(connect) == 0


def test_a_connection_that_names_itself_keeps_its_name(private_redis_url: str) -> None:
    named = redis.Redis.from_url(private_redis_url, driver_info=redis.DriverInfo(name="mine", lib_version="1.2"))
    worker = Worker([Queue("q", connection=named)], connection=named)
    assert announced(worker.connection) == ("mine", "1.2")
    named.close()
