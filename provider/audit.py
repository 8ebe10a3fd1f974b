"""What the log holds for a ledger's references, over HTTP: the checker's view
of a provider on another host (the lab reads a local provider's log file).

    POST /ledgers/{ledger}/audit   {"references": [...]}  ->  {"effects": N, "records": {ref: counts}}

Read-only: it counts what `LogReader` counts and changes nothing (not even
the read counters a lookup bumps).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from provider.store import LogReader

MAX_REFERENCES = 1000
MAX_NAME = 200


class AuditBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    references: list[Annotated[str, Field(min_length=1, max_length=MAX_NAME)]] = Field(max_length=MAX_REFERENCES)


class Counts(BaseModel):
    effects: int
    withdrawn: int
    declined: int
    sends: int
    lookups: int


class Audit(BaseModel):
    effects: int
    records: dict[str, Counts]


def router(log: LogReader, bad_request: dict[int | str, dict[str, Any]]) -> APIRouter:
    routes = APIRouter()

    @routes.post("/ledgers/{ledger}/audit", response_model=Audit, responses=bad_request)
    async def audit(ledger: Annotated[str, Path(min_length=1, max_length=MAX_NAME)], body: AuditBody) -> dict[str, Any]:
        records = log.records(ledger, body.references)
        return {"effects": log.effect_count(ledger), "records": {r: asdict(c) for r, c in records.items()}}

    return routes
