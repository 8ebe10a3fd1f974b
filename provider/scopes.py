"""A user's job's credential: its scoped token, checked against its ledger's secret.

The lab registers a secret per ledger (PUT /ledgers/{ledger}/scope) and signs each
attempt's token with it (`labcore.scoped`). The secrets are kept with the log, so a
restarted provider honours the URLs handed out before; here they are read through
once per ledger. A token may carry the attempt's armed provider-side fault: it
holds the attempt's first effect only, whichever client sends it.
"""

from __future__ import annotations

from labcore.events import Hit
from labcore.scoped import BadScope, Scope, read, verify
from provider.store import Store


class Scopes:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._secrets: dict[str, str] = {}  # ledger -> its secret, read through from the store
        self._fired: set[str] = set()  # armed hits that have held their effect

    def put(self, ledger: str, secret: str) -> None:
        """The ledger's secret from now on (`UnknownLedger` for a ledger the store does not have)."""
        self._store.put_scope_secret(ledger, secret)
        self._secrets[ledger] = secret

    def verify(self, token: str) -> Scope:
        """The token's scope, if its ledger's secret signed it; BadScope otherwise."""
        ledger = read(token).ledger
        secret = self._secrets.get(ledger) or self._store.scope_secret(ledger)
        if secret is None:
            raise BadScope("no scoped access to this ledger")  # the name is the caller's input: not repeated
        self._secrets[ledger] = secret
        return verify(token, secret)

    def first_use(self, scope: Scope) -> Hit | None:
        """The scope's armed hit, the first time an effect of it is admitted; None after."""
        if scope.hit is None:
            return None
        hit = Hit.from_header(scope.hit)
        if hit.hit in self._fired:
            return None
        self._fired.add(hit.hit)
        return hit
