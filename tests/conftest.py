"""Fixtures shared by the tests (helpers live in tests/helpers.py)."""

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
