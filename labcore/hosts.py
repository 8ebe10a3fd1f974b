"""How a run gets workers from worker hosts: keys and messages, all in Redis.

A host (`testbed host`) exists before and after any run, so its own keys
are global; everything about one run lives under that run's prefix and goes
when the run deletes its keys.

    testbed:hosts:live:<host>   the host's registration (JSON `Registration`); expires unless the
                                  host refreshes it every HEARTBEAT seconds
    testbed:hosts:runs           set of the prefixes of runs that want hosts' workers
    <prefix>:hosts:request       what the run asks for (JSON `RunRequest`): its key prefixes, queue,
                                  provider URL, RQ's settings, and which hosts are to serve it
    <prefix>:hosts:controller    the run's controller is alive (refreshed; expires CONTROLLER_TTL
                                  after the controller stops): hosts stop the run's workers without it
    <prefix>:hosts:state:<host> what a host runs for the run (JSON `HostState`)
    <prefix>:hosts:orders:<host> the controller's orders to that host (list of JSON `Order`)
    <prefix>:hosts:reply:<order> the host's answer to one order (list of one JSON `OrderReply`)

Secrets are not in any of these: a host passes its Redis URL and the
provider token it was given to its workers through their environment.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

HOSTS = "testbed:hosts"
RUNS = f"{HOSTS}:runs"
HEARTBEAT = 1.0  # seconds between refreshes of a heartbeat key
HOST_TTL = 5  # a registration outlives a missed beat or three, not a dead host
CONTROLLER_TTL = 5

T = TypeVar("T")


def live_key(host: str) -> str:
    return f"{HOSTS}:live:{host}"


LIVE_PATTERN = live_key("*")


def host_of_live_key(key: str) -> str:
    return key.removeprefix(live_key(""))


@dataclass(frozen=True, slots=True)
class RunHostKeys:
    prefix: str

    @property
    def request(self) -> str:
        return f"{self.prefix}:hosts:request"

    @property
    def controller(self) -> str:
        return f"{self.prefix}:hosts:controller"

    def state(self, host: str) -> str:
        return f"{self.prefix}:hosts:state:{host}"

    def orders(self, host: str) -> str:
        return f"{self.prefix}:hosts:orders:{host}"

    def reply(self, order: str) -> str:
        return f"{self.prefix}:hosts:reply:{order}"


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    hostname: str
    pid: int
    workers: int  # worker processes it starts per run
    no_partition: str = ""  # why it cannot cut its machine off the provider (partition); "" if it can


@dataclass(frozen=True, slots=True)
class RunRequest:
    prefix: str  # the run's key prefix (bus, intents, hosts' keys)
    rq_prefix: str  # RQ_KEY_PREFIX of the run's workers
    queue: str
    provider_url: str
    hosts: list[str]  # the hosts that are to serve the run (those live when it started)
    worker_ttl: int = 420
    maintenance_interval: int = 600
    job_monitoring_interval: int = 30


@dataclass(frozen=True, slots=True)
class HostState:
    workers: dict[str, int] = field(default_factory=dict)  # worker name -> pid, live ones
    dead: list[str] = field(default_factory=list)  # workers that died without an order (named, with how)
    stopped: bool = False  # the host has stopped every worker of the run
    swept: int = 0  # once stopped: the processes the run's jobs left there, found as its workers went


class OrderKind:
    KILL = "kill"  # SIGKILL a work-horse (and, if whole, its worker first)
    REPLACE = "replace"  # reap a killed worker, start a fresh one
    CUT = "cut"  # cut the host off from the run's provider (partition)
    HEAL = "heal"  # undo the cut


@dataclass(frozen=True, slots=True)
class Order:
    id: str
    kind: str
    worker: str  # the RQ worker name the hit came from
    horse_pid: int = 0
    whole: bool = False
    hit: str = ""  # a cut's or heal's hit: the host heals once every hit that cut it has healed


@dataclass(frozen=True, slots=True)
class OrderReply:
    id: str
    ok: bool
    error: str = ""
    victims: list[int] = field(default_factory=list)
    at: float = 0.0  # when the host sent the first SIGKILL, or began the cut or heal (its clock)
    confirmed_ms: float = 0.0  # from the SIGKILL until psutil saw every victim gone; the cut or heal in place
    already_gone: list[int] = field(default_factory=list)
    gone: bool = False  # refused: the kill's work-horse had exited and been reaped (its attempt had ended)
    fresh: str = ""  # a replacement's worker name
    fresh_pid: int = 0


def new_order_id() -> str:
    return secrets.token_hex(8)


def encode(message: Registration | RunRequest | HostState | Order | OrderReply) -> str:
    return json.dumps(asdict(message), separators=(",", ":"))


def decode(cls: type[T], raw: str | bytes) -> T:
    """ValueError for anything that is not such a message."""
    try:
        fields: dict[str, Any] = json.loads(raw)
        return cls(**fields)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a {cls.__name__}: {exc}") from None
