"""The framework's JSON answer, the app's routes' and the scoped API's alike
(provider.app, provider.api): a replayed send's carries the replay header."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from labcore.answers import REPLAYED


def json_response(status: int, body: dict[str, Any], replayed: bool = False) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={REPLAYED: "true"} if replayed else None)
