"""An op's intent, as the run stores it in Redis (the cell's `ops` hash, under
the op's id) before its first job is enqueued, and as every attempt reads it
back: the op's sequence number, the logical action it is for, and its
payload. Written and parsed here only.

A frozen dataclass and the json module, nothing more: every work-horse
decodes one on its way to the provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class OpIntent:
    seq: int
    intent: str  # the logical action: the op's own id, unless the planner made the op again under a new one
    payload: dict[str, Any]

    def encode(self) -> str:
        return json.dumps({"seq": self.seq, "intent": self.intent, "payload": self.payload})

    @classmethod
    def decode(cls, raw: str | bytes) -> OpIntent:
        """KeyError or ValueError for anything that is not an intent."""
        fields = json.loads(raw)
        return cls(fields["seq"], fields["intent"], fields["payload"])
