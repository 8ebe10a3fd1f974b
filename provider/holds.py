"""The provider's side of fault injection.

A request may arrive with an armed hit (header `X-Testbed-Chaos`). When the
provider reaches that hit's boundary it reports to the controller and holds
the request until told what to do with it. Without a bus (a provider started
on its own) requests are never held.

The bus is connected by the first armed request, not at the provider's start:
redis-py's import is a large part of that start's CPU, and a run's first cell waits
for the provider while one of two cores has nothing else to do.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import replace

from labcore.boundaries import Boundary
from labcore.bus import Bus
from labcore.events import Hit, Side
from labcore.faults import ABANDONED, RULES, Release
from provider.buses import RunBuses
from provider.gate import Gate


class Holds:
    def __init__(self, connect: Callable[[], Bus | RunBuses] | None, gate: Gate) -> None:
        """`connect`: makes the one run's bus, or the buses of the runs each hit names (provider.buses)."""
        self._connect = connect
        self._bus: Bus | RunBuses | None = None
        self._gate = gate
        # Armed requests this process is about to die holding, not yet reported, by run.
        self._doomed: dict[str, tuple[Bus, list[Hit]]] = {}
        self._lock = threading.Lock()

    def _bus_of(self, hit: Hit | None) -> Bus | None:
        if hit is None or self._connect is None:
            return None
        with self._lock:
            if self._bus is None:
                self._bus = self._connect()
        return self._bus if isinstance(self._bus, Bus) else self._bus.of(hit)

    def at(self, boundary: Boundary, hit: Hit | None) -> Release | None:
        bus = self._bus_of(hit)
        if bus is None or hit is None or hit.boundary != boundary:
            return None
        held = replace(hit, side=Side.PROVIDER, holder=os.getpid())
        crash = RULES[hit.fault].kills_provider
        if crash:
            with self._lock:  # before it stops counting as in progress: a drain sees it here
                self._doomed.setdefault(bus.keys.bus, (bus, []))[1].append(held)
        self._gate.hold()
        try:
            if crash:
                # This process is about to be SIGKILLed: let no other request die half-done
                # with it, and report every armed request it will die holding (one that
                # reached its boundary during the drain would otherwise die unseen), all in
                # one transaction: the controller kills on the first report it reads.
                self._gate.close_and_drain()
                with self._lock:
                    due, self._doomed = list(self._doomed.values()), {}
                for doomed_bus, doomed in due:
                    doomed_bus.report(*doomed)
            else:
                bus.report(held)
            action = bus.await_release(hit.hit)
        finally:
            self._gate.reopen()
            self._gate.resume()
        # If the controller never answers, do what a killed client would leave behind.
        return ABANDONED[boundary] if action is None else action

    def done(self, boundary: Boundary, hit: Hit | None) -> None:
        """The held request's release has been carried out (state is final)."""
        bus = self._bus_of(hit)
        if bus is not None and hit is not None and hit.boundary == boundary:
            bus.acted(hit.hit)
