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

`flood <pid or 0> <seconds> <connections> [<port>...]` instead holds as many connections as it can,
up to <connections>, to every port that run's provider listens on (or to the ports named), each
with a request begun and never finished (`POST ... HTTP/1.1`, a header line, no end), and opens
another for each one the server closes; also in processes of its own where one process may not
hold that many descriptors. It tries the run's unix sockets too. It prints one JSON report: its
connections opened, closed by the server and most held at once, and the errors it met, by kind.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import re
import resource
import select
import socket
import sys
import time
from collections import Counter
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
    found: set[int] = set()
    frontier = {root}
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
    calls: list[tuple[str, str, dict[str, object] | None]] = [("GET", "/openapi.json", None)]
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


HALF_SENT = b"POST /ledgers/x/effects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def hold(port: int, share: int, deadline: float, root: int) -> dict[str, int]:
    """Holds up to `share` connections to `port`, each with a half-sent request, until `deadline` or the
    end of the run `root` (if not 0), replacing each the server closes. Connects do not wait: one the
    server has not accepted yet (in its backlog, or its SYN not answered) is held as well."""
    held: dict[int, socket.socket] = {}
    sent: set[int] = set()  # connected, the half request written
    poller = select.epoll()
    counts: Counter[str] = Counter()
    while time.monotonic() < deadline and (not root or os.path.exists(f"/proc/{root}")):
        for _ in range(min(share - len(held), 2000)):  # a round's new connections, then a look at the old
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            conn.setblocking(False)
            error = conn.connect_ex(("127.0.0.1", port))
            if error not in (0, errno.EINPROGRESS):
                counts[errno.errorcode.get(error, str(error))] += 1
                conn.close()
                break
            held[conn.fileno()] = conn
            poller.register(conn.fileno(), select.EPOLLOUT | select.EPOLLIN | select.EPOLLRDHUP)
            counts["opened"] += 1
        counts["most_held"] = max(counts["most_held"], len(held))
        for fd, events in poller.poll(0.05):
            conn = held[fd]
            if fd not in sent and events == select.EPOLLOUT:  # connected: the request begins, never to end
                with contextlib.suppress(OSError):
                    conn.send(HALF_SENT)
                sent.add(fd)
                poller.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)
                continue
            poller.unregister(fd)
            sent.discard(fd)
            held.pop(fd).close()
            counts["closed_by_server"] += 1
    for conn in held.values():
        conn.close()
    return dict(counts)


def flood(root: int, seconds: float, connections: int, ports: list[int]) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    found = Targets()
    while root and not found.provider_port and time.monotonic() < deadline and os.path.exists(f"/proc/{root}"):
        found = targets(root)
        time.sleep(0.02)
    ports = ports or ([found.provider_port] if found.provider_port else [])
    unix_replies = {path: redis_attack(unix(path))[:1] for path in sorted(found.redis_unix)}
    _, most = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (most, most))
    per_process = max(most - 100, 100)
    shares = [min(per_process, connections - n) for n in range(0, connections, per_process)]
    children = []
    for port in ports:
        for share in shares:
            reader, writer = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(reader)
                report = json.dumps(hold(port, share, deadline, root)).encode()
                os.write(writer, report)
                os._exit(0)
            os.close(writer)
            children.append((pid, reader))
    totals: Counter[str] = Counter()
    for pid, reader in children:
        with os.fdopen(reader, "rb") as out:
            for kind, n in json.loads(out.read() or b"{}").items():
                totals[kind] += n
        os.waitpid(pid, 0)
    return {"uid": os.getuid(), "ports": ports, "processes": len(children), "unix": unix_replies, **totals}


GONE = "connect: FileNotFoundError"


def main() -> None:
    if sys.argv[1] == "flood":
        ports = [int(p) for p in sys.argv[5:]]
        print(json.dumps(flood(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), ports)))
        return
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
