"""What the stored run's formats share: the base of their records, the one line
that says where a file does not match its schema, and an event as a row's
history and the history stream hold it.

The records are pydantic models, strict (a count is a JSON integer, a flag
true or false), named on the wire as the files name them (camelCase), and
built on their first use: a run imports this before its processes start and
reads nothing back until its end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labcore.events import EventKind, Noted
from testbed.errors import UsageError
from testbed.judge.scorecard import camel

# What a few of pydantic's error types say, in the words of this project's messages.
_SAID = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "missing": "missing",
    "extra_forbidden": "not a field of it",
    "unexpected_keyword_argument": "not a field of it",
}


JSON_SCHEMA = "https://json-schema.org/draft/2020-12/schema"  # the dialect pydantic writes


class Record(BaseModel):
    """The base of every stored record: read-only, strict, camelCase on the wire. Built on
    its first use (defer_build), and described with Field(description=...), not docstrings
    read from the source: a run imports the history's records while its processes boot."""

    model_config = ConfigDict(
        strict=True,
        frozen=True,
        alias_generator=camel,
        defer_build=True,
        field_title_generator=lambda name, _: camel(name),
    )


class StoredEvent(Record):
    """One event of an op's history (`labcore.events.Noted` as JSON): what happened and
    when, and the event's own fields besides (attempt, worker, pid, boundary, ...)."""

    model_config = ConfigDict(extra="allow")

    event: str = Field(
        description="What happened: attempt-start, contact, call-timeout, attempt-end (the attempt's own reports);"
        " hit, killed, worker-restarted, recovered, nemesis, partitioned, healed (the controller's)."
    )
    at: float = Field(description="When, in seconds since the epoch.")

    def as_dict(self) -> dict[str, Any]:
        """As it was stored: `event`, `at`, then its own fields in their order."""
        return self.model_dump()

    def get(self, name: str, default: Any = None) -> Any:
        """One of the event's own fields (`attempt`, `worker`, `pid`, ...), or `default`."""
        return (self.model_extra or {}).get(name, default)

    def noted(self) -> Noted:
        return Noted(EventKind(self.event), self.at, dict(self.model_extra or {}))


class Mismatch(UsageError):
    """A stored file that does not match its schema (exit 2, one line)."""

    def __init__(self, where: str, schema: str, error: ValidationError) -> None:
        super().__init__(f"{where} does not match the {schema} schema: {describe(error)}")


def published(schema: dict[str, Any], title: str | None = None) -> dict[str, Any]:
    """A JSON Schema as the docs publish it: its dialect named, and its title if given."""
    named = {"$schema": JSON_SCHEMA} | ({"title": title} if title else {})
    return named | {k: v for k, v in schema.items() if k not in named}


def shown(path: Path) -> str:
    """A file as a message names it: from the working directory when it is below it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def describe(error: ValidationError) -> str:
    """The first thing wrong, where it is (`rows.3.effects: expected an integer`), and how many more."""
    errors = error.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    said = _SAID.get(first["type"], first["msg"][:1].lower() + first["msg"][1:])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {said}{more}" if where else f"{said}{more}"
