"""How a run gets workers from agents on other hosts: keys and messages, all in Redis.

An agent (`testbed agent`) exists before and after any run, so its own keys
are global; everything about one run lives under that run's prefix and goes
when the run deletes its keys.

    testbed:agents:live:<agent>   the agent's registration (JSON `Registration`); expires unless the
                                  agent refreshes it every HEARTBEAT seconds
    testbed:agents:runs           set of the prefixes of runs that want agents' workers
    <prefix>:agents:request       what the run asks for (JSON `Request`): its key prefixes, queue,
                                  provider URL, RQ's settings, and which agents are to serve it
    <prefix>:agents:controller    the run's controller is alive (refreshed; expires CONTROLLER_TTL
                                  after the controller stops): agents stop the run's workers without it
    <prefix>:agents:state:<agent> what an agent runs for the run (JSON `AgentState`)
    <prefix>:agents:orders:<agent> the controller's orders to that agent (list of JSON `Order`)
    <prefix>:agents:reply:<order> the agent's answer to one order (list of one JSON `Reply`)

Secrets are not in any of these: an agent passes its Redis URL and the
provider token it was given to its workers through their environment.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

AGENTS = "testbed:agents"
RUNS = f"{AGENTS}:runs"
HEARTBEAT = 1.0  # seconds between refreshes of a heartbeat key
AGENT_TTL = 5  # a registration outlives a missed beat or three, not a dead agent
CONTROLLER_TTL = 5

T = TypeVar("T")


def live_key(agent: str) -> str:
    return f"{AGENTS}:live:{agent}"


LIVE_PATTERN = live_key("*")


def agent_of_live_key(key: str) -> str:
    return key.removeprefix(live_key(""))


@dataclass(frozen=True, slots=True)
class RunAgentKeys:
    prefix: str

    @property
    def request(self) -> str:
        return f"{self.prefix}:agents:request"

    @property
    def controller(self) -> str:
        return f"{self.prefix}:agents:controller"

    def state(self, agent: str) -> str:
        return f"{self.prefix}:agents:state:{agent}"

    def orders(self, agent: str) -> str:
        return f"{self.prefix}:agents:orders:{agent}"

    def reply(self, order: str) -> str:
        return f"{self.prefix}:agents:reply:{order}"


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    host: str
    pid: int
    workers: int  # worker processes it starts per run
    no_partition: str = ""  # why it cannot cut its host off the provider (partition); "" if it can


@dataclass(frozen=True, slots=True)
class Request:
    prefix: str  # the run's key prefix (bus, intents, agents' keys)
    rq_prefix: str  # RQ_KEY_PREFIX of the run's workers
    queue: str
    provider_url: str
    agents: list[str]  # the agents that are to serve the run (those live when it started)
    worker_ttl: int = 420
    maintenance_interval: int = 600
    job_monitoring_interval: int = 30


@dataclass(frozen=True, slots=True)
class AgentState:
    workers: dict[str, int] = field(default_factory=dict)  # worker name -> pid, live ones
    dead: list[str] = field(default_factory=list)  # workers that died without an order (named, with how)
    stopped: bool = False  # the agent has stopped every worker of the run


class OrderKind:
    KILL = "kill"  # SIGKILL a work-horse (and, if whole, its worker first)
    REPLACE = "replace"  # reap a killed worker, start a fresh one
    CUT = "cut"  # cut the agent's host off from the run's provider (partition)
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
class Reply:
    id: str
    ok: bool
    error: str = ""
    victims: list[int] = field(default_factory=list)
    at: float = 0.0  # when the agent sent the first SIGKILL, or began the cut or heal (its clock)
    confirmed_ms: float = 0.0  # from the SIGKILL until psutil saw every victim gone; the cut or heal in place
    already_gone: list[int] = field(default_factory=list)
    fresh: str = ""  # a replacement's worker name
    fresh_pid: int = 0


def new_order_id() -> str:
    return secrets.token_hex(8)


def encode(message: Registration | Request | AgentState | Order | Reply) -> str:
    return json.dumps(asdict(message), separators=(",", ":"))


def decode(cls: type[T], raw: str | bytes) -> T:
    """ValueError for anything that is not such a message."""
    try:
        fields: dict[str, Any] = json.loads(raw)
        return cls(**fields)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a {cls.__name__}: {exc}") from None
