"""The attempt a user's job is running, as its HTTP clients and `testbed.boundary` see it.

A work-horse runs one job, so the current attempt is process-wide (threads
the user's code starts see it too). Each worker-side boundary is passed at
most once per attempt, whoever reaches it first: the job wrapper, the
instrumented client, or the user's own `testbed.boundary(...)` call.

Kept free of heavy imports: `from testbed import boundary` loads this module
in the user's code, in or out of the lab.

A real destination behind the lab (labcore.destination) is reached at the attempt's
other scoped base URL; which of its requests are effects is decided by the user's
rules, with the code the provider applies to the same request, so that the work-horse's
boundaries and the proxy's lie on the same effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from labcore.answers import CallFailure
from labcore.boundaries import Boundary
from labcore.destination import Effects
from labcore.scoped import EFFECT_METHODS


@dataclass(frozen=True, slots=True)
class Proxied:
    """The attempt's base URL for its real destination (the provider forwards what is sent
    under it), and which of the requests sent there are effects."""

    base: str
    effects: Effects

    def is_call(self, url: str) -> bool:
        return url.startswith(self.base + "/") or url == self.base or url.startswith(self.base + "?")

    def is_effect(self, method: str, url: str, headers: Mapping[bytes, bytes], body: bytes) -> bool:
        """As the provider will judge it: the path after the base URL and the query as sent."""
        path, _, query = url[len(self.base) :].partition("?")
        return self.effects.of(method.upper(), path or "/", query, headers, body)


@dataclass(slots=True)
class Attempt:
    base: str  # the attempt's scoped base URL
    reach: Callable[[Boundary], None]  # blocks (and is killed) at an armed boundary
    timed_out: Callable[[], None]  # the attempt's effect call timed out
    answered: Callable[[str], None]  # the provider answered a call of this attempt
    failed: Callable[[CallFailure, str], None]  # a call of this attempt failed (how, and its error)
    destination: Proxied | None = None  # a run with a real destination behind the lab
    passed: set[Boundary] = field(default_factory=set)
    sent: bool = False  # the attempt's first effect call has been made
    timeout_reported: bool = False

    def at(self, boundary: Boundary) -> None:
        if boundary not in self.passed:
            self.passed.add(boundary)
            self.reach(boundary)

    def is_call(self, url: str) -> bool:
        return url.startswith(self.base + "/") or url == self.base

    def is_effect(self, method: str, url: str) -> bool:
        return method.upper() in EFFECT_METHODS and url.startswith(self.base + "/api/")

    def first_effect(self) -> bool:
        first, self.sent = not self.sent, True
        return first

    def call_timed_out(self) -> None:
        if not self.timeout_reported:
            self.timeout_reported = True
            self.timed_out()


_current: Attempt | None = None


def current() -> Attempt | None:
    return _current


@contextmanager
def running(attempt: Attempt) -> Iterator[Attempt]:
    global _current
    _current = attempt
    try:
        yield attempt
    finally:
        _current = None


def boundary(name: str) -> None:
    """Pass a worker-side boundary in your own code: `testbed.boundary("before-request")`
    just before your client sends the effect, `"after-receipt"` once you hold the answer.

    Needed only with a client the lab does not instrument (httpx, requests and
    urllib3 are); each boundary counts once per attempt. Outside the lab it does nothing.
    """
    try:
        where = Boundary(name)
    except ValueError:
        raise ValueError(f"unknown boundary {name!r} (choose from {', '.join(Boundary)})") from None
    if where.on_provider:
        raise ValueError(f"{name} is passed in the provider, not in your code")
    attempt = _current
    if attempt is not None:
        attempt.at(where)
