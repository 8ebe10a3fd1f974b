"""A worker host cut off from the provider, and healed: the `partition` fault,
carried out by the host daemon in the host's own network namespace.

Two policy-routing rules drop the TCP traffic between this host and the
provider's address and port, both ways: a `blackhole` rule for what goes out
(a new connection fails at once, a sent segment is lost) and one for what
comes in (the provider's answer never reaches the socket). Rules for incoming
packets are looked up after the `local` table's rule, which accepts anything
addressed to this host before any other rule is read; so while the cut lasts
the `local` rule moves behind the two, and healing puts it back in front
first. Only the provider's port on its address is cut: the host's Redis link
and everything else on the host carry on.

It needs CAP_NET_ADMIN in the host's network namespace and iproute2's `ip`.
The commands are built by pure functions; running them is the only I/O here.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from testbed.errors import RunFailure

# Where the rules go: the cut before the moved `local` rule, and all three
# before any rule of the host's own (which start at 0 only for `local`).
CUT_IN, CUT_OUT, LOCAL_MOVED = 1, 2, 3
_IP_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Peer:
    """The provider as this host reaches it."""

    address: str
    port: int

    @property
    def family(self) -> str:
        return "-6" if ipaddress.ip_address(self.address).version == 6 else "-4"


def cut_commands(peer: Peer) -> list[list[str]]:
    f, a, p = peer.family, peer.address, str(peer.port)
    return [
        ["ip", f, "rule", "add", "pref", str(CUT_IN), "from", a, "ipproto", "tcp", "sport", p, "blackhole"],
        ["ip", f, "rule", "add", "pref", str(CUT_OUT), "to", a, "ipproto", "tcp", "dport", p, "blackhole"],
        ["ip", f, "rule", "add", "pref", str(LOCAL_MOVED), "lookup", "local"],
        ["ip", f, "rule", "del", "pref", "0", "lookup", "local"],
    ]


def heal_commands(family: str, rules: list[dict[str, Any]]) -> list[list[str]]:
    """What puts a family's rules back as they were before any cut (of this
    host, or of one that died cutting): `local` in front first, then the
    moved copy and the cut rules go. `rules` is `ip -j rule show`."""

    def has(priority: int, **fields: object) -> bool:
        return any(r.get("priority") == priority and all(r.get(k) == v for k, v in fields.items()) for r in rules)

    commands = []
    if not has(0, table="local"):
        commands.append(["ip", family, "rule", "add", "pref", "0", "lookup", "local"])
    if has(LOCAL_MOVED, table="local"):
        commands.append(["ip", family, "rule", "del", "pref", str(LOCAL_MOVED), "lookup", "local"])
    for rule in rules:
        if rule.get("action") != "blackhole" or rule.get("ipproto") != "tcp":
            continue  # a rule of the host's own, wherever it is
        if rule.get("priority") == CUT_IN and "src" in rule and "sport" in rule:
            selector = ["from", str(rule["src"]), "ipproto", "tcp", "sport", str(rule["sport"])]
        elif rule.get("priority") == CUT_OUT and "dst" in rule and "dport" in rule:
            selector = ["to", str(rule["dst"]), "ipproto", "tcp", "dport", str(rule["dport"])]
        else:
            continue
        commands.append(["ip", family, "rule", "del", "pref", str(rule["priority"]), *selector, "blackhole"])
    return commands


def peer_of(url: str) -> Peer:
    """The provider's address and port as this host resolves them. A provider on
    this host cannot be cut off from it: that is refused."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(parts.hostname or "", port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RunFailure(f"cannot resolve the provider's host {parts.hostname!r}: {exc}") from None
    family, _, _, _, sockaddr = found[0]
    address = str(sockaddr[0])
    if _on_this_host(family, address):
        raise RunFailure(f"the provider ({address}) is on this host: a partition needs it on another")
    return Peer(address, port)


def _on_this_host(family: int, address: str) -> bool:
    if ipaddress.ip_address(address).is_loopback:
        return True
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))  # only an address of this host can be bound
        except OSError:
            return False
    return True


def can_cut() -> str | None:
    """None if this host's routing rules can be changed from here, else why not.
    Tried for real (a copy of the `local` rule added and taken away), as the
    right may come from the process or from a capability on `ip` itself."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    try:
        heal()  # whatever a dead host left, first
        # At a pref of its own: host daemons starting together on one machine must not collide.
        pref = str(secrets.randbelow(10_000) + 20_000)
        _ip(["ip", "-4", "rule", "add", "pref", pref, "lookup", "local"])
        _ip(["ip", "-4", "rule", "del", "pref", pref, "lookup", "local"])
    except RunFailure as exc:
        return f"cannot change this host's routing rules (it needs CAP_NET_ADMIN): {exc}"
    return None


def cut(peer: Peer) -> None:
    try:
        for argv in cut_commands(peer):
            _ip(argv)
    except RunFailure:
        heal()
        raise


def heal() -> None:
    for family in ("-4", "-6"):
        try:
            shown = _ip(["ip", "-j", family, "rule", "show"])
        except RunFailure:
            if family == "-6":
                continue  # no IPv6 on this host: nothing of it to heal
            raise
        for argv in heal_commands(family, json.loads(shown or "[]")):
            _ip(argv)


def _ip(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_IP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunFailure(f"{' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        raise RunFailure(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout
