"""Another local user attacking a run (tests/e2e/test_lockdown.py runs this file as `nobody`).

Standard library only (it runs on the system's python3, not the project's venv), and it knows only
what any local user can read: the process table (/proc/*/stat, /proc/*/cmdline) and the kernel's
socket tables (/proc/net/unix, /proc/net/tcp). Given the pid of a `testbed` process, it finds that
run's Redis (its unix socket or TCP port, from redis-server's process title) and its provider (a
loopback listener of the provider's owner that answers /health), then until the run ends it tries to

- reach Redis and enqueue a job, write a key, and move Redis's dump directory (CONFIG SET dir);
- call the provider's admin routes with no token: turn deduplication off, move the clock past key
  retention, withdraw effects, send an effect.

It prints one JSON report: every reply it got, by target.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field


def children_of(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def listening_provider(pid: int) -> int:
    """The provider's TCP port: the lab hands it an inherited socket, so its command line
    names no port; the kernel lists every listener and its owner, and the provider
    answers /health as itself."""
    with open(f"/proc/{pid}/status") as f:
        uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    loopback = "0100007F"
    ports = [int(r[1].split(":")[1], 16) for r in rows if r[3] == "0A" and r[1].startswith(loopback) and r[7] == uid]
    for port in ports:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if b'"status"' in conn.getresponse().read(256):
                return port
        except (OSError, http.client.HTTPException):
            continue
    return 0


@dataclass
class Targets:
    run: str = ""
    provider_port: int = 0
    redis_unix: set[str] = field(default_factory=set)
    redis_tcp: set[int] = field(default_factory=set)


def targets(root: int) -> Targets:
    """The run's provider port and run id, and its Redis endpoints, as `ps` shows them."""
    found = Targets()
    for pid in children_of(root):
        args = cmdline(pid)
        text = " ".join(args)
        if "-m provider" in text:
            found.provider_port = listening_provider(pid)
            prefix = re.search(r"--bus-prefix testbed:(\S+)", text)
            found.run = prefix.group(1) if prefix else found.run
        if "redis-server" in text:
            found.redis_unix |= set(re.findall(r"unixsocket:(\S+)", text))
            found.redis_tcp |= {int(p) for p in re.findall(r"(?:127\.0\.0\.1|\*|0\.0\.0\.0):(\d+)", text)}
    if found.run:  # the kernel lists every bound unix socket, whoever owns it
        with open("/proc/net/unix") as f:
            paths = {line.split()[-1] for line in f if found.run in line}
        found.redis_unix |= {p for p in paths if p.startswith("/")}
    return found


def resp(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for p in parts:
        b = p.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def redis_attack(connect: Callable[[], socket.socket]) -> list[str]:
    """Replies to PING, an enqueued job, a key written, CONFIG SET dir; or why it could not connect."""
    try:
        conn = connect()
    except OSError as exc:
        return [f"connect: {type(exc).__name__}"]
    replies = []
    with conn:
        conn.settimeout(2)
        for command in (
            ("PING",),
            ("RPUSH", "rq:queue:default", "attacker-job"),
            ("HSET", "rq:job:attacker-job", "data", "os.system('id')"),
            ("SET", "attacker", "was here"),
            ("CONFIG", "SET", "dir", "/tmp"),
        ):
            try:
                conn.sendall(resp(*command))
                replies.append(conn.recv(200).decode(errors="replace").strip())
            except OSError as exc:
                replies.append(f"{command[0]}: {type(exc).__name__}")
                break
    return replies


def unix(path: str) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        return s

    return connect


def tcp(port: int) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=2)


def provider_attack(port: int, run: str) -> list[int | str]:
    """Status codes of the admin calls, on every ledger this run may have."""
    statuses: list[int | str] = []
    ledgers = [f"{run}.c{i:03d}" for i in range(4)]
    calls = [("GET", "/openapi.json", None)]
    for ledger in ledgers:
        calls += [
            ("PUT", f"/ledgers/{ledger}", {"dedup": False}),
            ("POST", f"/ledgers/{ledger}/clock", {"advance_seconds": 10**7}),
            ("POST", f"/ledgers/{ledger}/effects/tenant-demo:notification:10/withdraw", None),
            ("POST", f"/ledgers/{ledger}/effects", {"reference": "x", "recipient": "a@b", "message": "m"}),
        ]
    for method, path, body in calls:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            headers = {"Content-Type": "application/json", "Authorization": "Bearer "}
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            statuses.append(conn.getresponse().status)
            conn.close()
        except OSError as exc:
            statuses.append(type(exc).__name__)
    return statuses


GONE = "connect: FileNotFoundError"


def main() -> None:
    root, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
    redis: dict[str, list[str]] = {}
    provider: list[int | str] = []
    rounds, seen = 0, Targets()
    while time.monotonic() < deadline and os.path.exists(f"/proc/{root}"):
        found = targets(root)
        if found.provider_port and found.run:
            replies = {path: redis_attack(unix(path)) for path in found.redis_unix}
            replies |= {str(port): redis_attack(tcp(port)) for port in found.redis_tcp}
            if any(GONE in r for r in replies.values()):
                # Another user is refused a private dir's socket before it could learn that
                # the socket is missing: the run has removed its dir, it is over.
                break
            seen = found
            for target, got in replies.items():
                redis.setdefault(target, []).extend(got)
            provider.extend(provider_attack(found.provider_port, found.run))
            rounds += 1
        time.sleep(0.05)
    targets_seen = {**asdict(seen), "redis_unix": sorted(seen.redis_unix), "redis_tcp": sorted(seen.redis_tcp)}
    print(
        json.dumps(
            {"uid": os.getuid(), "rounds": rounds, "targets": targets_seen, "redis": redis, "provider": provider}
        )
    )


if __name__ == "__main__":
    main()
