"""The lab's jobs on Celery: the app a Celery run's workers serve, bound to the run's Redis.

A run with `--engine celery` forks real Celery workers (prefork pool, one pool
child each) from its zygote (`workers.zygote`); the pool child is the process
that runs an attempt and that a `kill` fault kills, as RQ's work-horse is.
The app is either the lab's own, with one task per delivery setting
(`labcore.engines.celery.SETTINGS`) for the built-in job and one for a user's
function, or the user's own app (`--celery-app`), whose task named by
`--handler` runs with its own options. Either way the lab overrides only
where the app's messages and results go (`bind`): the run's Redis, under the
run's keys, and no remote control (its mailbox would live outside them).

What the lab needs to know of Celery's verdict, it learns from Celery's own
signals, in the worker: a worker ready to take tasks (`worker_ready`), a task
Celery gave up on (`task_failure`, sent once its retries, if any, are spent,
and by the worker's main process for a pool child that died).

Nothing here is imported by an RQ run.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from celery import Celery, Task, signals
from redis import Redis, RedisError

from labcore import connections
from labcore.credentials import RQ_URL_ENV
from labcore.engines.celery import APP_TASK, Delivery, task_name, task_options
from labcore.keys import RunKeys
from workers import horses
from workers.engines import ENGINE_ENV as ENGINE_ENV  # the lab sets it in its Celery workers' environment
from workers.instrument import WORKER_ENV, Job

# Set by the run in its Celery workers' environment.
PREFIX_ENV = "TESTBED_RUN_PREFIX"  # the run's keys
RETRIES_ENV = "TESTBED_RETRIES"  # max_retries of the autoretry setting
APP_ENV = "TESTBED_CELERY_APP"  # the user's app, package.module:attribute
HANDLER_ENV = "TESTBED_CELERY_TASK"  # the user's task in it, package.module:attribute
PATHS_ENV = "TESTBED_CELERY_PATHS"  # os.pathsep-separated, put on sys.path before the app's import
VISIBILITY_ENV = "TESTBED_VISIBILITY_TIMEOUT"  # seconds; unset: the app's own (Celery's default, an hour)

# Where a message carries what the lab needs of it, beside the task's own arguments.
LAB_KWARG = "testbed"


def key_prefix(run_prefix: str) -> str:
    """Every key the run's Celery writes (broker and results) starts with this."""
    return f"{run_prefix}:celery:"


def celery_url(url: str) -> str:
    """The run's Redis as Celery names it: a unix socket is `redis+socket://` to kombu."""
    parts = urlsplit(url)
    # The lab's own wait for a paused Redis (labcore.connections.waiting_url): kombu takes no such option.
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "socket_timeout"])
    return urlunsplit(parts._replace(scheme="redis+socket" if parts.scheme == "unix" else parts.scheme, query=query))


def overrides(url: str, run_prefix: str, visibility: int | None, app: Celery | None = None) -> dict[str, Any]:
    """What the lab sets in an app's configuration: where its messages and results go, and,
    if given, how long the broker keeps a message unacknowledged before it restores it. With
    a visibility timeout given, kombu looks for such messages every second, not at every tenth
    of its 10 s ticks: the restore comes when the timeout says, not up to 100 s later."""
    prefix: dict[str, Any] = {"global_keyprefix": key_prefix(run_prefix)}
    broker = dict(app.conf.broker_transport_options or {}) if app is not None else {}
    backend = dict(app.conf.result_backend_transport_options or {}) if app is not None else {}
    restore: dict[str, Any] = {}
    if visibility is not None:
        restore = {"visibility_timeout": visibility, "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
    return {
        "broker_url": celery_url(url),
        "result_backend": celery_url(url),
        "broker_transport_options": broker | prefix | restore,
        "result_backend_transport_options": backend | prefix,
        "worker_enable_remote_control": False,
        "broker_connection_retry_on_startup": True,
        # JSON only, whatever the app says: a pickle another client of the Redis writes as a
        # message or a result would run its code in the worker, or in the lab, as it is loaded.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
    }


def bind(app: Celery, url: str, run_prefix: str, visibility: int | None) -> None:
    app.conf.update(overrides(url, run_prefix, visibility, app))


def lab_app(url: str, run_prefix: str, retries: int, visibility: int | None) -> Celery:
    """The lab's own app: the built-in job and the user's-function wrapper, once per delivery setting."""
    app = Celery("testbed", set_as_current=False)
    bind(app, url, run_prefix, visibility)
    # As few messages reserved per worker as Celery allows while it keeps prefetching (one per
    # pool child): under early ack a worker fetches its next message as it acknowledges the one
    # in hand, and a worker killed whole strands it until the visibility timeout.
    app.conf.update(worker_prefetch_multiplier=1)
    for delivery in Delivery:
        options = task_options(delivery, retries)
        app.task(name=task_name(delivery), bind=True, **options)(_builtin)
        app.task(name=task_name(delivery, user=True), bind=True, **options)(_user)
    return app


def _builtin(task: Task, spec: dict[str, Any], op: str, seq: int, enqueued: float | None = None) -> str:
    from workers import handler

    with _attempt(spec):
        return handler.run(_job(enqueued), spec, op, seq)


def _user(task: Task, spec: dict[str, Any], op: str, seq: int, enqueued: float | None = None) -> Any:
    from workers import userjob

    with _attempt(spec):
        return userjob.run(_job(enqueued), spec, op, seq)


def adopt(app: Celery, handler: Task) -> None:
    """The user's task takes the lab's messages (`APP_TASK`): each runs one attempt of an
    op, the task's own function called inside it. Its options stay its own."""
    original = handler.run

    @functools.wraps(original)
    def attempt(*args: Any, **kwargs: Any) -> Any:
        from workers import userjob

        lab = kwargs.pop(LAB_KWARG)
        with _attempt(lab["spec"]):
            return userjob.run(_job(lab["enqueued"]), lab["spec"], lab["op"], lab["seq"], function=original)

    handler.run = attempt  # before the worker builds its tracers, which read `run`
    app.tasks[APP_TASK] = handler


@functools.cache
def _redis() -> Redis:
    """The run's Redis, for the lab's keys: one client per process (redis-py opens
    new connections in a forked pool child)."""
    return connections.from_url(os.environ[RQ_URL_ENV])


def _job(enqueued: float | None) -> Job:
    return Job(_redis(), enqueued)


# What this pool child found in its worker's process group as it started: itself, its worker,
# and what a pool child killed before it left (`workers.horses`). Set as the pool child starts.
_FOUND: set[int] = set()


@contextlib.contextmanager
def _attempt(spec: dict[str, Any]) -> Iterator[None]:
    """One attempt of a lab's job in this pool child; once it has ended, however, what it left
    in the worker's process group stopped and counted under its cell, as RQ's worker counts
    what a work-horse left (`workers.worker`), the worker busy until then (`busy_workers`).
    Retried or not, the task ends after this."""
    keys = RunKeys(spec["prefix"])
    _redis().sadd(keys.busy_workers, os.environ[WORKER_ENV])
    since = horses.last_pid()
    try:
        yield
    finally:
        left = horses.stop_strays(_FOUND | {os.getpid(), os.getppid()}, since)
        # A Redis gone by now is a run ending (stopped, or failed and said so): nobody to tell.
        with contextlib.suppress(RedisError), _redis().pipeline(transaction=False) as pipe:
            if left:
                pipe.hincrby(keys.leftovers, spec["cell"], left)
            pipe.srem(keys.busy_workers, os.environ[WORKER_ENV])
            pipe.execute()


def preload() -> None:
    import celery.apps.worker
    import celery.bin.celery  # noqa: F401

    import workers.handler  # noqa: F401


def serve(argv: list[str]) -> None:
    """This process becomes one of the run's Celery workers: `celery worker` with these
    options, for the lab's app or the user's (`APP_ENV`), bound to the run's Redis."""
    url, prefix = os.environ[RQ_URL_ENV], os.environ[PREFIX_ENV]
    visibility = int(os.environ[VISIBILITY_ENV]) if VISIBILITY_ENV in os.environ else None
    spec = os.environ.get(APP_ENV)
    if spec is None:
        app = lab_app(url, prefix, int(os.environ.get(RETRIES_ENV, "1")), visibility)
    else:
        from workers import specs, userjob  # noqa: F401  (userjob instruments the HTTP clients)

        paths = [p for p in os.environ.get(PATHS_ENV, "").split(os.pathsep) if p]
        app = specs.find(spec, paths)
        bind(app, url, prefix, visibility)
        adopt(app, specs.find(os.environ[HANDLER_ENV], paths))
    app.worker_main(["worker", *argv])


# -- Celery's verdicts, as the workers hear them ------------------------------------


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]  # Celery ships no types
def _pool_child_started(**_: Any) -> None:
    """A pool child in place of one that died in a task, or the first: the group as it finds it
    is not its tasks' doing, and its worker is in no task now."""
    _FOUND.update(horses.live_members(os.getpgrp()))
    _redis().srem(RunKeys(os.environ[PREFIX_ENV]).busy_workers, os.environ[WORKER_ENV])


@signals.worker_ready.connect  # type: ignore[untyped-decorator]  # Celery ships no types
def _ready(sender: Any = None, **_: Any) -> None:
    name = str(sender.hostname).partition("@")[0]
    _redis().sadd(RunKeys(os.environ[PREFIX_ENV]).ready_workers, name)


@signals.task_failure.connect  # type: ignore[untyped-decorator]  # Celery ships no types
def _failed(task_id: str | None = None, **_: Any) -> None:
    if task_id is not None:
        _redis().sadd(RunKeys(os.environ[PREFIX_ENV]).given_up, task_id)


def check_tasks(app_spec: str, app: Any, tasks: Mapping[str, Any]) -> str | None:
    """Why `app` (imported from `app_spec`) is not a Celery app, or one of `tasks` (by spec) not
    one of its tasks; None if they are (the handlers' import check, `workers.specs`)."""
    if not callable(getattr(app, "worker_main", None)) or not hasattr(app, "tasks"):
        return f"--celery-app {app_spec}: not a Celery app (it is a {type(app).__name__})"
    for spec, task in tasks.items():
        name = getattr(task, "name", None)
        if name is None or name not in app.tasks:
            return f"handler {spec}: not a task of the Celery app {app_spec}"
    return None
