"""Who is at the other end of a connection: a user of this machine, or a remote address.

Every local client of a provider on loopback has the same address, so a cap per
address would put the lab's own processes and any other local user under one
cap. The kernel knows the user of each end: a unix socket says it
(SO_PEERCRED), and for TCP the socket at the other end is looked up by its
addresses with the kernel's socket-diagnostics netlink (what `ss` uses), which
any user may ask. A peer that is not on this machine is known by its address,
as is a local one where the kernel will not say (no socket diagnostics).
"""

from __future__ import annotations

import contextlib
import socket
import struct

Client = int | str  # a local user's uid, or a remote address

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_ALL_STATES = 0xFFFFFFFF
_NO_COOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr
# inet_diag_req_v2, then its inet_diag_sockid: ports and addresses in network order, interface, cookie.
_REQUEST = struct.Struct("=BBBxI2s2s16s16sIII")
_UID_AT = _HEADER.size + 4 + 48 + 12  # inet_diag_msg: family..retrans, the sockid, expires, rqueue, wqueue, uid
_UCRED = struct.Struct("3i")  # pid, uid, gid


class Peers:
    """Looks up the client of each accepted connection; holds one netlink socket, opened on first use."""

    def __init__(self) -> None:
        self._diag: socket.socket | None = None
        self._seq = 0

    def client(self, sock: socket.socket) -> Client:
        if sock.family == socket.AF_UNIX:
            _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
            return int(uid)
        peer, local = sock.getpeername(), sock.getsockname()
        uid = self._owner(sock.family, peer, local)
        return str(peer[0]) if uid is None else uid

    def close(self) -> None:
        if self._diag is not None:
            self._diag.close()

    def _owner(self, family: int, peer: tuple[str, int], local: tuple[str, int]) -> int | None:
        """The uid owning the socket bound to `peer` and connected to `local`; None if no socket
        on this machine is (a remote peer), or the kernel will not say."""
        try:
            if self._diag is None:
                self._diag = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
                # The kernel answers within the send; never wait on the event loop for an answer.
                self._diag.setblocking(False)
            self._seq += 1
            request = _REQUEST.pack(
                family,
                socket.IPPROTO_TCP,
                0,
                _ALL_STATES,
                struct.pack("!H", peer[1]),
                struct.pack("!H", local[1]),
                socket.inet_pton(family, peer[0]).ljust(16, b"\0"),
                socket.inet_pton(family, local[0]).ljust(16, b"\0"),
                0,
                _NO_COOKIE,
                _NO_COOKIE,
            )
            header = _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, self._seq, 0)
            self._diag.send(header + request)
            answer = self._diag.recv(1024)
        except OSError:
            with contextlib.suppress(OSError):
                if self._diag is not None:
                    self._diag.close()
            self._diag = None
            return None
        _, kind, _, seq, _ = _HEADER.unpack_from(answer)
        if kind != _SOCK_DIAG_BY_FAMILY or seq != self._seq or len(answer) < _UID_AT + 4:
            return None  # NLMSG_ERROR: no such socket here
        return int(struct.unpack_from("=I", answer, _UID_AT)[0])
