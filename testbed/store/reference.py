"""The JSON Schemas of a stored run's files, as the docs publish them in
docs/reference/: `python -m testbed.store.reference [DIR]` writes them there
(a unit test fails while the committed ones differ from what this writes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

from testbed.store.evidence import destination_records_schema
from testbed.store.history import history_schema, provider_records_schema
from testbed.store.layout import DESTINATION_RECORDS, HISTORY, PROVIDER_RECORDS, RESULTS
from testbed.store.results import results_schema

DOCS = Path("docs/reference")

# Each JSON file of a stored run (each line, for a .jsonl) and its schema.
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    RESULTS: results_schema,
    HISTORY: history_schema,
    PROVIDER_RECORDS: provider_records_schema,
    DESTINATION_RECORDS: destination_records_schema,
}


def schema_file(name: str) -> str:
    """Where a stored file's schema is published: results.json -> results.schema.json."""
    return f"{PurePath(name).stem}.schema.json"


def rendered() -> dict[str, str]:
    """Each schema file's name and text."""
    return {schema_file(name): json.dumps(schema(), indent=2) + "\n" for name, schema in SCHEMAS.items()}


def write(directory: Path = DOCS) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in rendered().items():
        (directory / name).write_text(text)
        written.append(directory / name)
    return written


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    for path in write(Path(args[0]) if args else DOCS):
        print(path)


if __name__ == "__main__":
    main()
