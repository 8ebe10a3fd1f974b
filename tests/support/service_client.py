"""The provider's service in process, as the unit tests ask it: a request made of a method,
a URL, headers and a body (or JSON), handed to `Service.handle` as the server would hand it."""

from __future__ import annotations

import json as jsonlib
from typing import Any

from provider.gate import Gate
from provider.holds import Holds
from provider.service import HeldSend, Request, Response, Service
from provider.store import Store
from provider.wire import Fields


def request(
    method: str, url: str, headers: dict[str, str] | None = None, body: bytes = b"", json: Any = None
) -> Request:
    path, _, query = url.partition("?")
    fields = Fields((name.lower().encode(), value.encode("latin-1")) for name, value in (headers or {}).items())
    if json is not None:
        body = jsonlib.dumps(json).encode()
        fields.setdefault(b"content-type", b"application/json")
    return Request(method, path, query, fields, body)


class ServiceClient:
    def __init__(self, store: Store, token: str | None = None, holds: Holds | None = None) -> None:
        """`holds`: without one, a provider's with no bus (nothing is ever held), on the service's gate."""
        self.gate = Gate()
        self.service = Service(store, holds or Holds(None, self.gate), self.gate, token)
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    def ask(self, method: str, url: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Response | HeldSend:
        """With the token, unless `headers` has an Authorization of its own."""
        return self.service.handle(request(method, url, {**self._auth, **(headers or {})}, **kwargs))

    def answer(self, method: str, url: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Response:
        answer = self.ask(method, url, headers, **kwargs)
        assert isinstance(answer, Response), answer
        return answer
