"""A payload's identity on the wire: what the provider compares under one key."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# One encoder for every payload: `json.dumps` with options builds a new one each call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def fingerprint(payload: dict[str, Any]) -> str:
    """Canonical JSON, so key order does not matter."""
    return hashlib.sha256(_CANONICAL(payload).encode()).hexdigest()[:32]
