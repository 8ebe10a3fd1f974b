"""Every engine's delivery settings by name, the rows a cell runs under (`Cell.delivery`;
None: RQ's job, under RQ's retry budget). The lab, its workers' model and the report ask
here what a setting means; each engine's table is its own module (`labcore.engines`)."""

from __future__ import annotations

from dataclasses import replace

from labcore.choices import pick
from labcore.engines import celery, temporal
from labcore.redelivery import Redelivery, Setting

SETTINGS: dict[str, Setting] = {
    **celery.SETTINGS,
    celery.APP: celery.APP_SETTING,
    **temporal.SETTINGS,
    temporal.WORKFLOW_OWN: temporal.WORKFLOW_SETTING,
}


def askable(engine: str | None = None) -> list[str]:
    """The settings a run on this engine (or any) can ask for by name (not a user's app's own)."""
    return [n for n, s in SETTINGS.items() if engine in (None, s.engine) and s.redelivery is not None]


def parse_delivery(name: str, engine: str) -> str:
    return pick("delivery setting", name, {d: d for d in askable(engine)})


def known(name: str) -> bool:
    return name in SETTINGS


def redelivery(delivery: str | None, retries: int) -> Redelivery:
    """What the queue does with an attempt that did not return: RQ's `Retry(max=retries)`
    (no delivery setting) or the setting's."""
    if delivery is None:
        return Redelivery.rq(retries)
    policy = policy_of(delivery, retries)
    if policy is None:
        raise ValueError(f"delivery setting {delivery}: its redelivery is its app's, not known")
    return policy


def policy_of(delivery: str | None, retries: int) -> Redelivery | None:
    """What the queue does with a struck attempt under a delivery setting; None where every attempt
    up to the last runs (RQ, `retries` shared by every cause) or where the lab does not know (a
    user's own app's options)."""
    setting = SETTINGS[delivery] if delivery is not None else None
    if setting is None or setting.redelivery is None:
        return None
    return replace(setting.redelivery, error=retries) if setting.retried else setting.redelivery


def acks_early(delivery: str | None) -> bool:
    """The setting acknowledges a task's message as it starts (None and a user's app: not known to)."""
    return delivery is not None and SETTINGS[delivery].acks_at_start is True


def acks_late(delivery: str) -> bool:
    """The setting acknowledges a task's message once it ends."""
    return SETTINGS[delivery].acks_at_start is False


def named(delivery: str) -> str:
    """`celery acks-late`: a setting as the run's words name it."""
    return f"{SETTINGS[delivery].engine} {delivery}"


def caption(delivery: str) -> str:
    """`celery acks-late (acks_late=True: ...)`: a setting named and said."""
    return f"{named(delivery)} ({SETTINGS[delivery].summary})"
