"""compose.yaml holds the Compose specification's schema, and each service runs a
command the namespace test runs (tests/e2e/test_hosts.py starts them all from it)."""

import json
import shutil
import subprocess

import jsonschema
import pytest

import testbed.cli.app  # noqa: F401  (registers the commands on app)
from testbed.cli.base import app
from tests.e2e import test_hosts
from tests.support import compose


def test_compose_file_holds_the_compose_specification() -> None:
    schema = json.loads(compose.SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(compose.load())]
    assert errors == []
    assert "Apache License" in (compose.SCHEMA.parent / "LICENSE").read_text()


def test_schema_would_catch_a_broken_file() -> None:
    """The check can fail: a service with a misspelt key, and a command of the wrong type."""
    schema = json.loads(compose.SCHEMA.read_text())
    broken = compose.load()
    broken["services"]["host"]["comand"] = "x"
    broken["services"]["lab"]["command"] = {"not": "a command"}
    assert len(list(jsonschema.Draft7Validator(schema).iter_errors(broken))) >= 2


def _compose() -> tuple[list[str] | None, str]:
    """Compose v2 (the docker plugin, or a v2 docker-compose), or why the check is skipped:
    compose.yaml has a top-level `name:`, which the deprecated Compose v1 rejects."""
    found = []
    for cli in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cli[0]) is None:
            continue
        done = subprocess.run([*cli, "version", "--short"], capture_output=True, text=True)
        version = done.stdout.strip().removeprefix("v")
        if done.returncode != 0 or not version:
            continue
        if int(version.split(".")[0]) >= 2:
            return cli, ""
        found.append(f"{' '.join(cli)} {version}")
    if found:
        return None, f"{found[0]} is Compose v1; compose.yaml needs Compose v2 (its top-level name:)"
    return None, "no docker compose here; the schema check above stands in"


COMPOSE_CLI, NO_COMPOSE = _compose()


@pytest.mark.skipif(COMPOSE_CLI is None, reason=NO_COMPOSE)
def test_docker_compose_config_accepts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBED_REDIS_PASSWORD", "x" * 24)
    monkeypatch.setenv("TESTBED_PROVIDER_TOKEN", "y" * 32)
    done = subprocess.run([*(COMPOSE_CLI or []), "-f", str(compose.COMPOSE), "config", "-q"], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_the_services_the_issue_names() -> None:
    services = compose.services()
    assert set(services) == {"redis", "provider", "host", "lab"}
    assert services["host"]["deploy"]["replicas"] == 2
    assert any(v.endswith(":/data") for v in services["provider"]["volumes"])
    assert any(v.endswith(":/lab") for v in services["lab"]["volumes"])
    # Secrets come from the environment, never a command line.
    for name, service in services.items():
        assert not any("${" in part for part in service["command"]), name


def test_every_service_runs_a_command_the_namespace_test_runs() -> None:
    """The namespace test starts each of these services from compose.yaml with compose.argv."""
    assert set(test_hosts.SERVICES_RUN) == set(compose.services())
    command = __import__("typer").main.get_command(app)
    for name in compose.services():
        argv = compose.argv(name)
        if argv[1:3] == ["-m", "testbed"]:
            # A real testbed command with options it takes (parsed, not run).
            sub = command.commands[argv[3]]
            sub.make_context(argv[3], argv[4:])
        else:
            assert argv[1:3] == ["-m", "provider"], name
