"""Fixtures shared by the tests (helpers live in tests/helpers.py)."""

from pathlib import Path

import pytest

import testbed.plugin


def pytest_configure(config: pytest.Config) -> None:
    # An environment installed before the plugin's entry point existed: register it by hand.
    if not config.pluginmanager.is_registered(testbed.plugin):
        config.pluginmanager.register(testbed.plugin, "testbed")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
