"""A payload's identity on the wire: what the provider compares under one key."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def fingerprint(payload: dict[str, Any]) -> str:
    """Canonical JSON, so key order does not matter."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
