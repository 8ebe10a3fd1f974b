"""The article's 12 cells on the real stack: private Redis, provider process, RQ workers, SIGKILL."""

import pytest

from tests.support.helpers import Ran, assert_left_nothing

pytestmark = pytest.mark.e2e

# DESIGN.md's table: effects / missing, 100 ops, every 10th op's first attempt killed, one retry.
ARTICLE = {
    "retry-only": {"none": (100, 0), "before-effect": (100, 0), "after-effect": (110, 0)},
    "record-after": {"none": (100, 0), "before-effect": (100, 0), "after-effect": (110, 0)},
    "record-before": {"none": (100, 0), "before-effect": (90, 10), "after-effect": (100, 0)},
    "provider-key": {"none": (100, 0), "before-effect": (100, 0), "after-effect": (100, 0)},
}


def test_default_run_reproduces_the_articles_table(default_chaos: Ran) -> None:
    assert default_chaos.code == 0, default_chaos.stderr
    rows = default_chaos.json["rows"]
    assert len(rows) == 12
    observed = {(r["strategy"], r["boundary"]): (r["effects"], r["missingOperations"]) for r in rows}
    expected = {(s, b): v for s, cells in ARTICLE.items() for b, v in cells.items()}
    assert observed == expected
    for row in rows:
        assert row["intended"] == 100 and row["verdict"] == "pass"
        assert row["kills"] == (0 if row["boundary"] == "none" else 10)
    assert "12/12 cells as expected" in default_chaos.stdout


def test_clean_cell(default_chaos: Ran) -> None:
    row = default_chaos.row("provider-key", "after-effect")
    assert (row["effects"], row["duplicateEffects"], row["missingOperations"]) == (100, 0, 0)
    assert (row["requests"], row["kills"], row["replays"]) == (110, 10, 10)


def test_duplicates_cell(default_chaos: Ran) -> None:
    row = default_chaos.row("record-after", "after-effect")
    assert (row["effects"], row["duplicateEffects"], row["missingOperations"]) == (110, 10, 0)
    assert row["falseCompletions"] == 0


def test_missing_cell_is_a_silent_loss(default_chaos: Ran) -> None:
    row = default_chaos.row("record-before", "before-effect")
    assert (row["effects"], row["missingOperations"], row["skippedWithoutEffect"]) == (90, 10, 10)
    # The ledger says done for all ten: nothing in the queue shows the loss.
    assert (row["falseCompletions"], row["jobsFailed"], row["unresolved"]) == (10, 0, 0)


def test_results_carry_run_metadata(default_chaos: Ran) -> None:
    meta = default_chaos.json
    assert meta["verdict"] == "pass"
    assert {"rq", "redis", "psutil", "typer", "python", "redis-server"} <= set(meta["versions"])
    assert meta["options"]["ops"] == 100 and meta["seed"] == 0
    assert meta["wallSeconds"] > 0
    for row in meta["rows"]:
        assert row["wallSeconds"] > 0


def test_the_table_is_printed_in_the_articles_layout(default_chaos: Ran) -> None:
    lines = default_chaos.stdout.splitlines()
    header = next(line for line in lines if line.startswith("strategy"))
    assert header.split() == ["strategy", "none", "before-effect", "after-effect"]
    record_before = next(line for line in lines if line.startswith("record-before"))
    assert "90 / 10" in record_before


def test_default_run_left_nothing_behind(default_chaos: Ran) -> None:
    assert len(default_chaos.descendants) >= 4  # redis, provider, workers (and their work-horses)
    assert_left_nothing(default_chaos)
