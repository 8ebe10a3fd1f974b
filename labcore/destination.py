"""A real destination behind the lab: its URL, and which of a job's requests to it are effects.

A user's job may talk to a real HTTP API (a sandbox of it) through the provider, which
forwards each request and holds an effect at its boundaries (`provider.forward`). What
is an effect is the user's to say, as rules, each spelled as on the command line
(`--destination-effect`) and carried so to the provider:

- `POST`, or `POST /v1/payment_intents*`: a method, and a path pattern (shell-style,
  matched against the path after the job's base URL);
- `X-Amz-Target: AmazonSQS.SendMessage`: a header and its value;
- `Action=SendMessage`: a field of a form body or of the query and its value.

A request is an effect if any rule matches it; by default one of `POST`, `PUT`,
`PATCH` and `DELETE` is. The rest are reads: forwarded, and counted as such, never
held. Pure: the lab checks the rules, and both the provider and the work-horse apply
them with this code, each to the request as it sees it, so that they agree on which
request is the effect; the rules travel to either as `Effects.spelled` gives them.

With a destination, all the boundaries are there. `job-start` and `after-record` are
the job wrapper's, in the work-horse. `before-request` and `after-receipt` are the job's
own HTTP client's, instrumented in the work-horse (`workers.http_probes`): its first
effect of the attempt passes `before-request` just before it is sent (a kill there: no
request left the work-horse, neither the proxy nor the destination saw it), and
`after-receipt` once its answer is back in the work-horse, before the SDK has it (the
destination has applied it, the proxy has passed the answer on, the job never got it).
`before-effect` and `after-effect` are the proxy's (`provider.forward`): the request
held before it is forwarded, and the destination's answer held before it is passed back.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from labcore.boundaries import Boundary
from labcore.scoped import EFFECT_METHODS

_METHOD = re.compile(r"[A-Z]+")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header's name (RFC 9110's token)
_FORM = b"application/x-www-form-urlencoded"
MAX_RULES = 64
MAX_URL = 2000


class BadDestination(ValueError):
    """A destination URL or an effect rule that cannot be used: the message says why."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One way a request is an effect: set fields must all match."""

    method: str | None = None
    path: str | None = None  # a shell-style pattern
    header: str | None = None  # in lower case
    field: str | None = None  # of a form body, or of the query
    value: str = ""

    def matches(self, method: str, path: str, query: str, headers: Mapping[bytes, bytes], body: bytes) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and not fnmatch.fnmatchcase(path, self.path):
            return False
        if self.header is not None:
            given = headers.get(self.header.encode("latin-1"))
            return given is not None and given.decode("latin-1").strip() == self.value
        if self.field is not None:
            return self.value in _fields(self.field, query, headers, body)
        return True

    def spelled(self) -> str:
        """As `parse_rule` reads it."""
        if self.header is not None:
            return f"{self.header}: {self.value}"
        if self.field is not None:
            return f"{self.field}={self.value}"
        return f"{self.method} {self.path}" if self.path is not None else str(self.method)


def _fields(name: str, query: str, headers: Mapping[bytes, bytes], body: bytes) -> list[str]:
    """The values of a field in the query, and in the body if it is a form."""
    values = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == name]
    content_type = headers.get(b"content-type", b"").partition(b";")[0].strip().lower()
    if content_type == _FORM:
        form = body.decode("latin-1")
        values += [v for k, v in parse_qsl(form, keep_blank_values=True) if k == name]
    return values


DEFAULT_RULES = tuple(Rule(method=m) for m in sorted(EFFECT_METHODS))


def parse_rule(text: str) -> Rule:
    """A rule as spelled (see the module); BadDestination says what is wrong with it."""
    text = text.strip()
    name, colon, value = text.partition(":")
    if colon and _TOKEN.fullmatch(name.strip()) and " " not in name.strip():
        return Rule(header=name.strip().lower(), value=value.strip())
    field, equals, value = text.partition("=")
    if equals and field and " " not in field:
        return Rule(field=field, value=value)
    method, _, path = text.partition(" ")
    if _METHOD.fullmatch(method) and (not path or path.strip().startswith("/")):
        return Rule(method=method, path=path.strip() or None)
    raise BadDestination(f"effect rule {text!r} must be a METHOD [/path*], a 'Header: value' or a field=value")


@dataclass(frozen=True, slots=True)
class Effects:
    """Which requests are effects: any of the rules matching."""

    rules: tuple[Rule, ...] = DEFAULT_RULES

    @classmethod
    def parse(cls, texts: Sequence[str]) -> Effects:
        if len(texts) > MAX_RULES:
            raise BadDestination(f"at most {MAX_RULES} effect rules")
        return cls(tuple(parse_rule(t) for t in texts)) if texts else cls()

    def of(self, method: str, path: str, query: str, headers: Mapping[bytes, bytes], body: bytes) -> bool:
        """Whether this request is an effect."""
        return any(r.matches(method, path, query, headers, body) for r in self.rules)

    def spelled(self) -> list[str]:
        return [r.spelled() for r in self.rules]


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a ledger's jobs' requests go on to (its base URL), and which of them are effects."""

    url: str
    effects: Effects = Effects()

    @property
    def origin(self) -> tuple[str, str, int]:
        """The scheme, the host and the port connected to."""
        parts = urlsplit(self.url)
        scheme = parts.scheme
        return scheme, parts.hostname or "", parts.port or _DEFAULT_PORTS[scheme]

    @property
    def is_mail(self) -> bool:
        """An SMTP destination (`smtp://host:port`): every message the job sends is an effect,
        relayed at the end of its DATA (`provider.smtp`)."""
        return is_mail_url(self.url)

    @property
    def base_path(self) -> str:
        """The URL's own path, which every forwarded path goes under (no trailing "/")."""
        return urlsplit(self.url).path.rstrip("/")

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "effects": self.effects.spelled()}


MAIL_SCHEME = "smtp"
# The job's own client's boundaries: a job's mail client (smtplib) is not instrumented, so a kill there never strikes.
MAIL_CLIENT_SIDE = (Boundary.BEFORE_REQUEST, Boundary.AFTER_RECEIPT)
_DEFAULT_PORTS = {"http": 80, "https": 443, MAIL_SCHEME: 25}


def parse_url(url: str) -> str:
    """A destination's base URL: http(s), a host, maybe a port and a path; no query, no credentials.
    Or an SMTP server's, `smtp://host:port`, with no path either."""
    if len(url) > MAX_URL:
        raise BadDestination(f"destination URL over {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a port out of range raises here)
    except ValueError:
        raise BadDestination(f"destination {url!r} is not a URL") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise BadDestination(f"destination {url!r} must be an http://, https:// or smtp:// URL with a host")
    if parts.scheme == MAIL_SCHEME and parts.path not in ("", "/"):
        raise BadDestination(f"destination {url!r}: an SMTP server's URL has no path")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise BadDestination(f"destination {url!r}: no query, fragment or credentials in the URL")
    return url


def is_mail_url(url: str | None) -> bool:
    """A `--destination` naming an SMTP server."""
    return url is not None and urlsplit(url).scheme == MAIL_SCHEME


def mail_refused(boundaries: Iterable[Boundary | None]) -> str | None:
    """Why these boundaries cannot be struck at an smtp:// destination, if they cannot."""
    armed = set(boundaries)  # read once: it may be a generator
    at_client = [b.value for b in MAIL_CLIENT_SIDE if b in armed]
    if not at_client:
        return None
    return (
        f"{' and '.join(at_client)} at an smtp:// destination: the job's mail client is not one the lab"
        " instruments; a message is seen at the relay only (--boundary before-effect, after-effect)"
    )
