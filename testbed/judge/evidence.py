"""The destination's records as the judge: what a user's evidence reader answered for a
cell's ops, checked, and counted as their effects.

The reader answers `{op_id: [record id, ...]}` (`workers.evidence`): for each op, the
ids of the records the destination holds for it. An op it does not name holds none.
The answer is the only source of an op's effects; the provider's log still says how
many of its requests were effects and reads (the proxy's, `provider.forward`). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from labcore.scoped import user_op_id
from provider.store import ReferenceRecord

if TYPE_CHECKING:
    from testbed.judge.facts import ProviderRecords

Evidence = Mapping[str, tuple[str, ...]]  # op id -> the destination's record ids for it


def counted_at(url: str, reader: str) -> str:
    """A destination as a breach's words name the source of its counts: by its URL's host (and
    port), and the reader that read its records."""
    return f"the destination {urlsplit(url).netloc} (read by {reader})"


class BadEvidence(ValueError):
    """An answer that is not `{op_id: [record id, ...]}` over the ops asked about: why, in words."""


def parse_answer(text: str, op_ids: Sequence[str]) -> Evidence:
    """The reader's answer, as printed: JSON of an object from op ids asked about to lists of
    record ids (strings, or numbers taken as their text), each record named once."""
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        raise BadEvidence("its answer is not JSON") from None
    if not isinstance(answer, dict):
        raise BadEvidence(f"its answer is a JSON {type(answer).__name__}, not an object of op ids")
    asked = set(op_ids)
    evidence: dict[str, tuple[str, ...]] = {}
    for op, records in answer.items():
        if op not in asked:
            raise BadEvidence(f"its answer names {op!r}, an op it was not asked about")
        if not isinstance(records, list) or not all(_is_id(r) for r in records):
            raise BadEvidence(f"its answer for {op!r} is not a list of record ids")
        ids = tuple(str(r) for r in records)
        if len(set(ids)) != len(ids):
            raise BadEvidence(f"its answer for {op!r} names a record twice")
        evidence[op] = ids
    return evidence


def _is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class EvidenceRecords:
    """The provider's records of a ledger's ops, with each op's effects the destination's
    records of it (`read` asks the reader about these op ids)."""

    def __init__(
        self,
        log: ProviderRecords,
        read: Callable[[list[str]], Evidence],
        kept: Callable[[str, Evidence], None] | None = None,
    ) -> None:
        """`kept(ledger, answer)` hears of each answer as it is counted (the run keeps it, to be judged again)."""
        self._log = log
        self._read = read
        self._kept = kept
        self.answers: dict[str, tuple[str, ...]] = {}  # every op asked about: what the destination holds

    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]:
        ops = {reference: user_op_id(ledger, reference) for reference in references}
        evidence = self._read(list(ops.values()))
        logged = self._log.records(ledger, references)
        out = {}
        for reference, op in ops.items():
            held = self.answers[op] = evidence.get(op, ())
            out[reference] = replace(logged.get(reference, ReferenceRecord()), effects=len(held), withdrawn=0)
        if self._kept is not None:
            self._kept(ledger, {op: self.answers[op] for op in ops.values()})
        return out
