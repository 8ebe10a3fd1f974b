"""The bounded reader of files read a line at a time (history.jsonl, provider-records.jsonl)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import inputs


def test_lines_are_read_with_their_numbers(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\n\nbc\nd")
    assert list(inputs.lines(path)) == [(1, b"a\n"), (2, b"\n"), (3, b"bc\n"), (4, b"d")]


def test_a_line_past_its_cap_is_refused_with_its_number_without_reading_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"ok\n" + b"x" * 11 + b"\n")
    read = inputs.lines(path, line_cap=10)
    assert next(read) == (1, b"ok\n")
    with pytest.raises(inputs.InputError, match=r"^line 2 is longer than the 10 bytes the lab reads of a line$"):
        next(read)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    os.mkfifo(path)
    with pytest.raises(inputs.InputError, match=r"^a FIFO, not a regular file$"):
        next(inputs.lines(path))
