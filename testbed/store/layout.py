"""A stored run as a whole: the files of `runs/<run-id>/`, and what each holds.

Each format is written and read in one module: results.json in
`testbed.store.results`, the two line files in `testbed.store.history`, the
destination's records in `testbed.store.evidence`; their
JSON Schemas are published in docs/reference/ (`testbed.store.reference`).
The run store (`testbed.store.runs`) makes the directory and keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

RESULTS = "results.json"
HISTORY = "history.jsonl"
PROVIDER_LOG = "provider.sqlite3"
PROVIDER_RECORDS = "provider-records.jsonl"
DESTINATION_RECORDS = "destination-records.jsonl"
LOGS = "logs"
REPORT = "report.html"
COUNTEREXAMPLE = "counterexample.json"
DIGESTS = "digests.json"


@dataclass(frozen=True, slots=True)
class StoredFile:
    name: str
    holds: str
    always: bool  # every stored run has it


FILES = (
    StoredFile(RESULTS, "the run's results, as --json writes them", True),
    StoredFile(
        HISTORY,
        "written as the run goes: each cell as it starts, every event of its watched ops, anomalies,"
        " and each op's local facts as its cell is judged (the provider's side stays in its log)",
        True,
    ),
    StoredFile(PROVIDER_LOG, "a consistent copy of the effect log of a provider the run started (SQLite)", False),
    StoredFile(
        PROVIDER_RECORDS,
        "for a provider the run did not start (its log stays on its host): what its audit said of each op,"
        " as the run judged it",
        False,
    ),
    StoredFile(
        DESTINATION_RECORDS,
        "for a run against a real destination (--destination): what its evidence reader answered after each"
        " cell, the destination's records of each op, from which `testbed check` counts the effects again",
        False,
    ),
    StoredFile(LOGS, "the logs of the run's processes (provider, workers, Redis), kept as the run ends", True),
    StoredFile(REPORT, "the run's report page, once --report or `testbed report` has written it", False),
    StoredFile(
        COUNTEREXAMPLE,
        "explore: the smallest schedule it found that fails, as `testbed chaos --schedule` replays it",
        False,
    ),
    StoredFile(
        DIGESTS,
        "the sha256 of every other file (but report.html), written last: `testbed check`, `report` and"
        " `compare` refuse a run whose files differ from it (an edit or an accident; it is no signature)",
        False,
    ),
)
