"""The stack a run stands on: Redis, the provider process, the RQ workers.

Everything it starts is stopped in reverse order whatever happens (an error,
Ctrl-C, SIGTERM), and its temp dir is removed unless the user keeps it.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Self, cast

from labcore.bus import Bus
from labcore.credentials import redacted
from labcore.keys import QUEUE, RunKeys, rq_prefix, run_prefix
from labcore.procs import stop_all
from provider.store import LogReader, ReferenceRecord
from testbed.engines.base import Engine, JobQueue, RQTimers
from testbed.engines.rq import RQ
from testbed.errors import RunFailure, SetupError
from testbed.infra import leftovers
from testbed.infra.engine_server import engine_server
from testbed.infra.liveness import PartDied, shows_dead, stopped
from testbed.infra.provider_process import ProviderAdmin, ProviderProcess
from testbed.infra.redis_server import PrivateRedis
from testbed.infra.sandbox import SandboxCommand, running, sandbox_part
from testbed.infra.started import StartedPart
from testbed.infra.supervisor import Supervisor

if TYPE_CHECKING:
    import redis as redis_lib

# How long the end of a run's cells waits for its workers to count what their last work-horses
# left: a worker does it in milliseconds once its work-horse has exited.
COUNTED_WITHIN = 2.0


@dataclass(frozen=True, slots=True)
class RemoteOptions:
    """A provider and hosts already running (testbed.infra.hosts): the run starts none of its parts."""

    provider_url: str
    provider_token: str | None
    partition: bool = False  # the run cuts worker hosts off the provider: every host must be able to


@dataclass(frozen=True, slots=True)
class StackOptions:
    workers: int = 4
    redis_url: str | None = None  # None: a private redis-server
    redis_private: bool = False  # the user's word that redis_url, without a password, is theirs alone
    provider_port: int = 0  # 0: a free port
    settings: RQTimers = field(default_factory=RQTimers)
    keep: bool = False
    remote: RemoteOptions | None = None
    engine: Engine = field(default_factory=RQ)  # the queue the jobs run on, and its workers
    sandbox: SandboxCommand | None = None  # the users' destination, started as a part of the stack
    mail_relay: bool = False  # the provider relays SMTP too (an smtp:// destination)


class ProviderEndpoint(Protocol):
    """Where a run's provider answers: the process the run started (ProviderProcess),
    or one on the network (testbed.infra.hosts.RemoteProvider)."""

    @property
    def url(self) -> str: ...

    @property
    def job_url(self) -> str:
        """The address the built-in job's work-horses send to."""
        ...

    @property
    def db(self) -> Path | None:
        """Its log, where it is on this machine."""
        ...

    @property
    def mail_relay(self) -> str | None:
        """Where it relays SMTP (host:port), if it does."""
        ...


class EffectLog(Protocol):
    """What the run reads of the provider's log: the file itself (provider.store.LogReader),
    or, for a provider on another host, its audit over HTTP (testbed.infra.hosts.RemoteLog)."""

    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]: ...

    def effect_count(self, ledger: str) -> int: ...

    def close(self) -> None: ...


class RunStack(ABC):
    """What a run stands on, whoever started its parts: this process (Stack) or the
    hosts (testbed.infra.hosts.HostStack). `with` starts the parts without waiting
    for them; `wait_ready()` waits. Everything started is stopped in reverse order
    on the way out."""

    workdir: Path
    redis_url: str
    redis: redis_lib.Redis
    bus: Bus
    provider: ProviderEndpoint
    admin: ProviderAdmin  # set by wait_ready
    log: EffectLog  # set by wait_ready

    def __init__(self, run_id: str, options: StackOptions) -> None:
        self.run_id = run_id
        self.options = options
        self.keys = RunKeys(run_prefix(run_id))
        # The run's engine, as its workers and queue reach its server, once that is started.
        self.engine = options.engine
        self._exit = contextlib.ExitStack()
        self.sandbox: StartedPart | None = None  # the destination's, while one runs as a part of the stack

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    @abstractmethod
    def _start(self) -> None: ...

    @abstractmethod
    def wait_ready(self) -> None: ...

    @abstractmethod
    def check(self) -> None:
        """Every part still alive, or a PartDied naming the one that is not."""

    def paused(self) -> list[str]:
        """The parts on this machine that a signal stopped (another host's are not seen)."""
        return []

    @contextlib.contextmanager
    def sandboxed(self, command: SandboxCommand | None) -> Iterator[None]:
        """The destination's sandbox a part of the stack while the block runs (the plugin's runs,
        on a lab started before them): started, answering, watched by `check`, then stopped."""
        if command is None:
            yield
            return
        with running(command, self.workdir) as self.sandbox:
            try:
                yield
            finally:
                self.sandbox = None

    def _check_sandbox(self) -> None:
        if self.sandbox is not None:
            self.sandbox.check()

    def job_queue(self, retries: int) -> JobQueue:
        """Where the run's jobs go: its engine's queue (`retries`: RQ's `Retry(max=retries)`)."""
        try:
            jobs = self.engine.job_queue(self.redis, self.redis_url, self.keys, retries)
        except OSError as exc:  # its server did not answer: name the part if one died
            shows_dead(self.check)
            raise RunFailure(f"the run could not reach its queue: {type(exc).__name__}: {exc}") from None
        self._exit.callback(jobs.close)
        return jobs

    @abstractmethod
    def stop_services(self) -> None:
        """The parts that serve the run stopped (the provider's log is whole after this)."""

    def leftover_processes(self) -> int:
        """How many processes the run's jobs left running after their work-horses ended, all
        stopped: counted by the workers as each work-horse ended (`leftovers_by_cell`), and
        found where the workers ran, on every host, once they were gone. Asked once the
        services are stopped."""
        return sum(self.leftovers_by_cell().values()) + self.swept()

    def leftovers_by_cell(self) -> dict[str, int]:
        """What the work-horses of each cell (by id) left in their process groups, counted by
        their workers as each ended: whole once no worker is still ending a job (`jobs_counted`)."""
        import redis as redis_lib

        try:
            counted = cast("dict[bytes, bytes]", self.redis.hgetall(self.keys.leftovers))
        except redis_lib.RedisError:  # the run lost its Redis: said elsewhere
            return {}
        return {cell.decode(): int(count) for cell, count in counted.items()}

    def jobs_counted(self, within: float = COUNTED_WITHIN) -> None:
        """Once every job of the cells run is over: until no live worker is still ending one.
        A cell is judged as its last job ends, a moment before that job's work-horse has
        exited and its worker has counted what it left; a worker still ending one after
        `within` (a work-horse that hangs after its job) is left to the run's end."""
        deadline = time.monotonic() + within
        engine = self.options.engine
        while engine.ending(self.redis, self.keys, self._live_workers()) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _live_workers(self) -> list[str]:
        """The names of the run's workers that were not killed."""
        return []

    def swept(self) -> int:
        """Processes of the run's jobs found, and stopped, once the workers were stopped: those
        that left their work-horses' groups (a daemon), or that no worker lived to count."""
        return 0

    def _close(self) -> None:
        # A second Ctrl-C must not cut the teardown short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._exit.close()
        finally:
            signal.signal(signal.SIGINT, previous)


class Stack(RunStack):
    """The parts this process starts: `with Stack(...) as stack:` starts the processes
    without waiting for them; `stack.wait_ready()` waits. Their start-up is mostly
    Python imports, so the caller can do its own meanwhile."""

    provider: ProviderProcess
    supervisor: Supervisor
    log: LogReader

    def __init__(self, run_id: str, options: StackOptions) -> None:
        super().__init__(run_id, options)
        self._private: PrivateRedis | None = None
        self._server: StartedPart | None = None
        self._ownership: leftovers.KeyOwnership | None = None

    def _start(self) -> None:
        o = self.options
        # What a dead run left behind is this run's to clear; a live run's is not.
        leftovers.remove_stale_dirs()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{leftovers.PREFIX}{self.run_id}-"))
        leftovers.claim(self.workdir, kept=o.keep)
        if not o.keep:
            self._exit.callback(shutil.rmtree, self.workdir, ignore_errors=True)
        if o.redis_url:
            self.redis_url = o.redis_url
            self.redis = connect(o.redis_url, refuse_open=not o.redis_private)
            self._ownership = ownership = leftovers.KeyOwnership(self.redis, self.keys)
            ownership.claim()
            if o.keep:
                self._exit.callback(ownership.keep)
            else:
                self._exit.callback(leftovers.delete_keys, self.redis, self.keys.pattern)
        else:
            self._private = private = PrivateRedis(self.workdir)
            self._exit.callback(private.stop)
            self.redis_url = private.launch()
        served = o.engine.server()
        if served is not None:
            self.engine, command = served
            self._server = server = engine_server(command, self.workdir)
            self._exit.callback(server.stop)  # after the workers, which reach it
            server.launch()
        self.provider = ProviderProcess(self.workdir, self.redis_url, self.keys.prefix, o.provider_port, o.mail_relay)
        self.supervisor = Supervisor(
            self.workdir,
            self.redis_url,
            rq_prefix(self.keys.prefix),
            QUEUE,
            o.settings,
            self.provider.token,
            self.engine,
            run_prefix=self.keys.prefix,
        )
        if o.sandbox is not None:
            # Stopped last, after the workers and the provider that may still talk to it.
            self.sandbox = sandbox_part(o.sandbox, self.workdir)
            self._exit.callback(self.sandbox.stop)
            self.sandbox.launch()
        self._exit.callback(self.stop_services)
        # The provider reaches Redis only when it first reports to the bus, and the
        # workers' zygote not at all: both import while the private Redis starts. The
        # workers register with Redis as soon as they are forked: after it answers.
        self.provider.launch()
        self.supervisor.boot()
        if self._private is not None:
            self._private.wait_ready()
            self.redis = connect(self.redis_url)
        self.bus = Bus(self.redis, self.keys)
        self.supervisor.start(o.workers)

    def wait_ready(self) -> None:
        self.provider.wait_ready()
        if self._server is not None:
            self._server.wait_ready()
        self.supervisor.wait_ready(self.redis)
        self.admin = ProviderAdmin(self.provider.job_url, self.provider.token)
        self._exit.callback(self.admin.close)
        self.log = LogReader(self.provider.db)
        self._exit.callback(self.log.close)
        if self.sandbox is not None:
            self.sandbox.wait_ready()

    def check(self) -> None:
        if self._private is not None:
            self._private.check()
        self.provider.check()
        if self._server is not None:
            self._server.check()
        try:
            self.supervisor.check()
        except PartDied:
            # A worker dies of its engine's server's death (its connection refused) as soon as the
            # server's sockets close, before the server's own death shows: name the cause.
            if self._server is not None:
                shows_dead(self._server.check)
            raise
        self._check_sandbox()
        if self._ownership is not None:
            self._ownership.beat()

    def paused(self) -> list[str]:
        parts = {"the private redis-server": None if self._private is None else self._private.pid}
        parts["the provider"] = self.provider.pid
        if self.sandbox is not None:
            parts[self.sandbox.name] = self.sandbox.pid
        parts |= {f"worker {w.name}": w.pid for w in self.supervisor.workers.values() if not w.killed}
        return stopped(parts)

    def stop_services(self) -> None:
        """Workers and provider (they do not need each other to shut down: together), then the zygote."""
        stop_all([*self.supervisor.release(), *self.provider.release()])
        self.supervisor.close()

    def _live_workers(self) -> list[str]:
        return [w.name for w in self.supervisor.workers.values() if not w.killed]

    def swept(self) -> int:
        return self.supervisor.swept


def connect(url: str, refuse_open: bool = False) -> redis_lib.Redis:
    """A client of the Redis at `url`, which answers; with `refuse_open`, one that takes no
    client without a password (`require_password`), checked before the run writes to it."""
    # Imported here: the command line imports the stack before it launches the run's
    # processes, and redis-py's import would hold back the provider's start.
    import redis as redis_lib

    from labcore import connections

    try:
        client = connections.from_url(url, socket_connect_timeout=3, health_check_interval=30)
        client.ping()
    except (redis_lib.RedisError, ValueError) as exc:
        raise SetupError(f"cannot reach Redis at {redacted(url)}: {exc}") from None
    if refuse_open:
        try:
            require_password(url)
        finally:
            client.close()
    return client


# The option that runs on a Redis without a password anyway (the command line's and `testbed host`'s).
PRIVATE_FLAG = "--redis-private"


def require_password(url: str) -> None:
    """Refuse (SetupError, before the run writes anything) a Redis that takes clients without
    a password: any other client of it could read the run's jobs and write jobs of its own.
    Asked as a stranger would: the URL's credentials left out, a PING answered is open,
    a NOAUTH (or any refusal) is not."""
    import redis as redis_lib

    from labcore import connections

    try:
        stranger = connections.from_url(url, socket_connect_timeout=3, socket_timeout=10)
    except ValueError as exc:
        raise SetupError(f"cannot reach Redis at {redacted(url)}: {exc}") from None
    for credential in ("username", "password"):  # wherever the URL put them: netloc or query
        stranger.connection_pool.connection_kwargs.pop(credential, None)
    try:
        stranger.ping()
    except (redis_lib.AuthenticationError, redis_lib.ResponseError):  # NOAUTH, or a PING not allowed
        return
    except redis_lib.RedisError as exc:
        raise SetupError(f"cannot reach Redis at {redacted(url)}: {exc}") from None
    finally:
        stranger.close()
    raise SetupError(
        f"the Redis at {redacted(url)} takes clients without a password: any of them could read"
        f" the run's jobs and forge its effects; set one (requirepass), or pass {PRIVATE_FLAG}"
        " if no one else can reach this Redis"
    )
