"""compose.yaml as the tests read it: its services, their commands and environment.

The namespace test (tests/e2e/test_hosts.py) starts every service with
`argv(service)`, so the file cannot drift from what is tested: a command is
run as written, `python` being this interpreter (the image's is the same).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
SCHEMA = ROOT / "tests" / "compose-spec" / "compose-spec.json"
_VARIABLE = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = load()["services"]
    return found


def argv(service: str) -> list[str]:
    command = services()[service]["command"]
    assert isinstance(command, list) and command[0] == "python", f"{service}: exec form, starting with python"
    return [sys.executable, *command[1:]]


def environment(service: str, variables: dict[str, str]) -> dict[str, str]:
    """The service's environment with ${VAR} (and ${VAR:?msg}, ${VAR:-x}) taken from `variables`."""
    env = services()[service].get("environment", {})
    return {k: _VARIABLE.sub(lambda m: variables[m.group(1)], str(v)) for k, v in env.items()}
