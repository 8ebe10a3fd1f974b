"""The provider process as the run sees it: started, reached over HTTP, stopped.

Each run's provider gets its own random bearer token; the token and the bus's
Redis URL reach it through its environment, never its command line.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from labcore.bounds import PAUSE_BOUND
from labcore.credentials import BUS_URL_ENV, TOKEN_ENV, bearer, new_secret
from labcore.destination import Destination
from labcore.endpoints import unix_path, unix_socket, unix_url
from labcore.procs import spawn
from labcore.scoped import ledger_secret
from provider.contract import Contract
from testbed.errors import RunFailure, SetupError, UsageError
from testbed.infra.liveness import check_alive
from testbed.infra.redis_server import socket_fits

if TYPE_CHECKING:
    import httpx


def provider_client(url: str, token: str | None, timeout: float) -> httpx.Client:
    """A client of a provider at `url` (a unix socket's too: `labcore.endpoints`) with the run's
    token, the environment's proxies ignored. TLS is set up only for https: httpx's default
    context loads the CA bundle for every client, wasted on the run's own plain-HTTP provider.
    httpx is imported here, not with this module: a run launches its processes first and
    imports httpx while they boot."""
    import httpx

    path = unix_path(url)
    verify = url.startswith("https:")
    # A transport given to the client is built with its own TLS settings: the client's are not its.
    transport = None if path is None else httpx.HTTPTransport(uds=path, verify=verify)
    return httpx.Client(
        base_url=url if path is None else "http://provider",
        headers=bearer(token),
        trust_env=False,
        timeout=timeout,
        verify=verify,
        transport=transport,
    )


class ProviderProcess:
    """The run's provider. The lab binds its listening sockets and hands them to each
    incarnation: while a crashed provider restarts, a connection waits in the socket's
    backlog for the next one rather than being refused, so the crash reaches only the
    requests the provider held, the ones the fault was planned for."""

    def __init__(self, workdir: Path, redis_url: str, prefix: str, port: int = 0, mail: bool = False) -> None:
        """`mail`: it relays SMTP too, on a loopback port of its own (`mail_relay`, host:port)."""
        self.db = workdir / "provider.sqlite3"
        self.log = workdir / "provider.log"
        self._sockets = [_listening(bind("127.0.0.1", port))]
        self.port = self._sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = new_secret()
        # The lab's own processes (the built-in job's work-horses, the controller) take the unix
        # socket in the run's private dir: no TCP connect per job, and no loopback port another
        # local user can crowd; users' jobs and anyone else use TCP.
        self.job_url = self.url
        uds = workdir / "provider.sock"
        if socket_fits(uds):
            self._sockets.append(_listening(unix_socket(uds)))
            self.job_url = unix_url(uds)
        self._argv = [sys.executable, "-m", "provider", "--db", str(self.db)]
        for sock in self._sockets:
            self._argv += ["--fd", str(sock.fileno())]
        self.mail_relay: str | None = None
        if mail:
            relay = _listening(bind("127.0.0.1", 0))
            self._sockets.append(relay)
            self.mail_relay = f"127.0.0.1:{relay.getsockname()[1]}"
            self._argv += ["--mail-fd", str(relay.fileno())]
        self._argv += ["--bus-prefix", prefix, "--parent-pid", str(os.getpid()), "--quiet"]
        self._env = {**os.environ, BUS_URL_ENV: redis_url, TOKEN_ENV: self.token}
        self._proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        self._proc = spawn(self._argv, self.log, env=self._env, pass_fds=[s.fileno() for s in self._sockets])

    def wait_ready(self, timeout: float = 20.0) -> None:
        import httpx

        assert self._proc is not None
        deadline = time.monotonic() + timeout
        with provider_client(self.job_url, None, timeout=1.0) as http:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
                    raise SetupError(f"provider process exited at start: {tail[0]}")
                try:
                    if http.get("/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                # The first cell waits for this answer, and a refused connect is cheap:
                # a short poll, so that the poll itself adds nothing to the run's start.
                time.sleep(0.005)
        raise SetupError(f"provider did not answer on {self.job_url} within {timeout:.0f} s")

    def check(self) -> None:
        check_alive("the provider", self._proc, self.log)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def relaunch(self) -> None:
        """After a crash the lab made: the same port, the same log."""
        assert self._proc is not None
        self._proc.wait()
        self.launch()
        try:
            self.wait_ready()
        except SetupError as exc:
            raise RunFailure(f"the provider did not come back after its crash: {exc}") from None

    def release(self) -> list[subprocess.Popen[bytes]]:
        """Hand the process over to be stopped; no restart will need the sockets."""
        for sock in self._sockets:
            sock.close()
        procs = [] if self._proc is None else [self._proc]
        self._proc = None
        return procs


def _listening(sock: socket.socket) -> socket.socket:
    sock.listen(socket.SOMAXCONN)
    return sock


def bind(host: str, port: int) -> socket.socket:
    """A provider's TCP socket, bound now: a bad address or a taken port is named before anything starts."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror:
        raise UsageError(f"--host {host}: not an address of this machine") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SetupError(f"provider port {port} is already in use") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"--host {host}: not an address of this machine") from None
        if exc.errno == errno.EACCES:
            raise SetupError(f"no permission to bind {host}:{port}") from None
        raise SetupError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    # Not listening yet: the caller says when a client may queue (`testbed provider` once it
    # serves; a run at once, as it holds the socket across the provider's restarts).
    return sock


class ProviderAdmin:
    """The controller's handle on the provider: contracts, and the nemesis's levers."""

    def __init__(self, url: str, token: str | None) -> None:
        self._http = provider_client(url, token, timeout=PAUSE_BOUND)
        self._token = token

    def close(self) -> None:
        self._http.close()

    def put_ledger(self, ledger: str, contract: Contract) -> None:
        self._send("PUT", f"/ledgers/{quote(ledger, safe='')}", contract.to_dict())

    def put_scope(self, ledger: str) -> None:
        """Register the secret users' jobs' scoped URLs for this ledger are signed with
        (provider/scopes.py): the work-horses derive it from the same token."""
        secret = ledger_secret(self._token, ledger)
        self._send("PUT", f"/ledgers/{quote(ledger, safe='')}/scope", {"secret": secret})

    def put_destination(self, ledger: str, destination: Destination) -> None:
        """Where the ledger's users' jobs' requests go on to, through the provider (provider/forward.py)."""
        self._send("PUT", f"/ledgers/{quote(ledger, safe='')}/destination", destination.to_json())

    def advance_clock(self, ledger: str, seconds: float) -> None:
        self._send("POST", f"/ledgers/{quote(ledger, safe='')}/clock", {"advance_seconds": seconds})

    def withdraw(self, ledger: str, reference: str) -> None:
        self._send("POST", f"/ledgers/{quote(ledger, safe='')}/effects/{quote(reference, safe='')}/withdraw")

    def failures(self) -> Failures:
        """What the provider has failed at on its own since it started (`provider.service.Failures`)."""
        health = self._http.get("/health").json()
        return Failures(int(health.get("failures", 0)), health.get("failure"))

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> None:
        # The controller's requests do not pass the provider's gate (provider/gate.py): never turned away.
        response = self._http.request(method, path, json=body)
        if response.status_code >= 500:  # the provider's own failure, not the request's
            raise RunFailure(f"the provider failed {method} {path}: {_error_of(response)}")
        if response.status_code >= 400:
            raise SetupError(f"provider refused {method} {path}: {response.text}")


@dataclass(frozen=True, slots=True)
class Failures:
    count: int = 0
    last: str | None = None

    def since(self, before: Failures) -> str | None:
        """The cause of the failures after `before`'s, if any."""
        if self.count <= before.count:
            return None
        return self.last or "the provider failed"


def _error_of(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
