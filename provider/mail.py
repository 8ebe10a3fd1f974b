"""The mail relay: a job's SMTP connection to the lab (`provider.smtp` reads its wire), and
each whole message sent on to an SMTP destination, its reply given back as the
destination gave it.

Each message goes to the destination on a connection of its own, closed after its reply,
for the reason `provider.forward` gives for HTTP: a connection the destination closed
meanwhile fails where no one can tell whether it took the message. It greets the
destination with the job's own HELO name and sends MAIL FROM with the job's parameters,
each recipient, and the DATA as it came; the job's AUTH is the lab's and is not sent. A
recipient the destination refuses is not the job's to hear at its RCPT (the relay had
answered it): a message some recipients took gets the DATA's reply; one none took gets
the last refusal, at the end of its DATA.

The relaying runs in a thread of its own (`Service.relay_mail` holds it at the
boundaries), so the client is the standard library's, blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import smtplib
import socket
import threading

from labcore.destination import Destination
from provider.forward import FORWARD_TIMEOUT, DestinationDown
from provider.service import Service
from provider.smtp import GREETING, Mail, Reply, Session

_log = logging.getLogger(__name__)
_READ = 64 * 1024


def deliver(destination: Destination, mail: Mail) -> Reply:
    """Send the message on and return the destination's reply to it; DestinationDown if none came."""
    _, host, port = destination.origin
    try:
        with smtplib.SMTP(host, port, local_hostname=mail.helo, timeout=FORWARD_TIMEOUT) as client:
            client.ehlo_or_helo_if_needed()
            code, text = client.mail(mail.sender, list(mail.options))
            if code != 250:
                return Reply(code, text.decode("utf-8", "replace"))
            refused: Reply | None = None
            taken = 0
            for recipient in mail.recipients:
                code, text = client.rcpt(recipient)
                if code in (250, 251):
                    taken += 1
                else:
                    refused = Reply(code, text.decode("utf-8", "replace"))
            if taken == 0 and refused is not None:
                return refused
            try:
                code, text = client.data(mail.data)
            except smtplib.SMTPDataError as exc:  # refused the DATA command itself
                error = exc.smtp_error
                return Reply(exc.smtp_code, error.decode("utf-8", "replace") if isinstance(error, bytes) else error)
            return Reply(code, text.decode("utf-8", "replace"))
    except (OSError, smtplib.SMTPException) as exc:
        raise DestinationDown(f"{type(exc).__name__}: {exc}") from None


async def serve(sock: socket.socket, service: Service) -> asyncio.AbstractServer:
    """The relay on a bound socket (a copy of it: the caller keeps its own)."""
    return await asyncio.start_server(lambda r, w: _session(r, w, service), sock=sock.dup())


async def _session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, service: Service) -> None:
    session = Session(service.mail_scoped)
    try:
        writer.write(GREETING.encode())
        while not session.closed:
            data = await reader.read(_READ)
            if not data:
                break
            items = session.feed(data)
            while items:
                mail = items[-1] if isinstance(items[-1], Mail) else None
                for item in items:
                    if isinstance(item, bytes):
                        writer.write(item)
                await writer.drain()
                items = [] if mail is None else session.relayed(await _relayed(service, mail))
    except ConnectionError:
        pass  # the client went away (a killed worker's)
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()


def _relayed(service: Service, mail: Mail) -> asyncio.Future[Reply]:
    """The message relayed in a thread of its own (it may be held for as long as the lab
    says), its reply a future of the event loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Reply] = loop.create_future()

    def run() -> None:
        try:
            reply = service.relay_mail(mail, deliver)
        except Exception as exc:
            _log.exception("Exception in a relayed message")
            reply = Reply(451, f"4.3.0 the lab failed at this message: {service.failed(exc).body['error']}")
        with contextlib.suppress(RuntimeError):  # the loop is closed: the provider stopped meanwhile
            loop.call_soon_threadsafe(done.set_result, reply)

    threading.Thread(target=run, name="relayed message", daemon=True).start()
    return done
