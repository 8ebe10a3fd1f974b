"""The generated reference names every command, option and route, and the guide builds with no broken link."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", DOCS / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _hook()


def _sections(page: str) -> dict[str, str]:
    """Each `## heading {#id}` of a page, by its heading text, with the text under it."""
    parts = re.split(r"^## (.+?)(?: \{#[^}]+\})?$", page, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_and_every_option_appears_under_its_command() -> None:
    import typer

    import testbed.cli.app  # noqa: F401  (registers every command)
    from testbed.cli.base import app

    group = typer.main.get_command(app)
    sections = _sections(reference.cli_markdown())
    commands = [name for name, command in group.commands.items() if not command.hidden]  # type: ignore[attr-defined]
    assert commands, "no command found"
    for name in commands:
        section = sections.get(f"testbed {name}")
        assert section is not None, f"testbed {name} has no section"
        command = group.commands[name]  # type: ignore[attr-defined]
        for param in command.params:
            if param.param_type_name == "option":
                for option in [*param.opts, *param.secondary_opts]:
                    assert f"`{option}" in section or f", {option}`" in section, f"{name}: {option} missing"
                if param.help:
                    assert param.help.split()[0] in section, f"{name}: the help of {param.opts} missing"
            else:
                assert f"`{param.metavar or param.name.upper()}`" in section, f"{name}: argument {param.name} missing"


def test_every_default_and_environment_variable_is_given() -> None:
    sections = _sections(reference.cli_markdown())
    chaos = sections["testbed chaos"]
    assert "| `--ops` | `N` | `100` |" in chaos
    assert "| `--json` | `PATH` | `results.json` |" in chaos
    assert "Environment: `REDIS_URL`" in chaos


def test_every_route_appears_with_its_parameters_and_responses() -> None:
    document = reference.openapi_document()
    sections = _sections(reference.http_api_markdown(document))
    operations = list(reference.http_operations(document))
    assert len(operations) >= 10, operations
    for method, path, operation in operations:
        section = sections.get(f"{method} {path}")
        assert section is not None, f"{method} {path} has no section"
        for parameter in operation.get("parameters", []):
            assert f"`{parameter['name']}`" in section, f"{method} {path}: {parameter['name']} missing"
        for status in operation["responses"]:
            assert f"| `{status}` |" in section, f"{method} {path}: {status} missing"
        if "requestBody" in operation:
            assert "Request body" in section
    for name in document["components"]["schemas"]:
        assert f"### {name} {{#schema-" in reference.http_api_markdown(document)


def test_every_field_of_every_stored_format_appears() -> None:
    from testbed.store.evidence import destination_records_schema
    from testbed.store.history import history_schema, provider_records_schema
    from testbed.store.layout import FILES
    from testbed.store.results import results_schema

    page = reference.stored_run_markdown()
    for file in FILES:
        assert f"| `{file.name}` |" in page, file.name
    for schema in (results_schema(), history_schema(), provider_records_schema(), destination_records_schema()):
        models = [schema, *schema.get("$defs", {}).values()]
        for model in models:
            for field in model.get("properties", {}):
                assert f"| `{field}` |" in page, f"{model.get('title')}.{field} missing"


def _names(module: str, table: str) -> list[str]:
    values = getattr(importlib.import_module(module), table)
    return [getattr(v, "value", v) for v in values]


@pytest.mark.parametrize(
    ("page", "module", "table"),
    [
        ("boundaries.md", "labcore.boundaries", "ORDER"),
        ("faults.md", "labcore.faults", "Fault"),
        ("strategies.md", "workers.strategies", "STRATEGIES"),
        ("scenarios.md", "testbed.experiment.scenarios", "SCENARIOS"),
    ],
)
def test_the_reference_tables_name_every_value_the_code_has(page: str, module: str, table: str) -> None:
    text = (DOCS / "reference" / page).read_text()
    missing = [name for name in _names(module, table) if f"| `{name}` |" not in text]
    assert not missing, f"{page} lacks {missing}"


@pytest.mark.slow
def test_the_guide_builds_with_no_broken_link_or_anchor(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    built = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stderr[-4000:]
    assert (site / "reference" / "cli" / "index.html").is_file()
    assert (site / "reference" / "http-api" / "index.html").is_file()
