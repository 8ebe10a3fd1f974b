"""A Ctrl-C while the command line is still importing ends as one line, like one during a run."""

import atexit
import gc
import importlib.abc
import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

import pytest

import testbed.__main__ as entry


class _InterruptedImport(importlib.abc.MetaPathFinder):
    """The Ctrl-C, as it lands in the middle of importing the command line."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "testbed.cli.app":
            raise KeyboardInterrupt
        return None


def test_a_ctrl_c_during_the_command_lines_imports_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "testbed.cli.app", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 130
    assert capsys.readouterr().err == "testbed: error: interrupted\n"


def test_the_command_line_leaves_what_it_imported_to_the_processs_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frozen at exit, the imports' objects are not collected again by the interpreter's teardown."""
    registered: list[Callable[..., object]] = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(sys, "argv", ["testbed", "--version"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0
    assert registered == [gc.freeze]


@pytest.mark.parametrize(
    ("start", "later"),
    [
        # What the command line runs before a run launches its provider and workers
        # (testbed.lab.session.execute): these imports would hold back the launch.
        (
            "import testbed.cli.app, testbed.lab.session, testbed.report.tables\n"
            "from testbed.report.live import Live\n"
            "Live().__enter__()",
            {"redis", "rich", "importlib.metadata"},
        ),
        # What the provider imports before it serves: a run's first cell waits for it.
        # Its bus is connected, and redis-py imported, by the first armed request (provider.holds);
        # it checks requests with shapes of its own (provider.shapes), no validation framework.
        ("import provider.__main__, provider.server", {"redis", "fastapi", "starlette", "uvicorn", "pydantic"}),
        # The agent runtimes and frameworks of the worked examples, Celery and Temporal, are optional
        # extras: only a handler imports the runtimes, only a run with --engine celery imports Celery, only
        # one with --engine temporal the Temporal SDK (and RQ's workers, its handler and its queue none of it).
        (
            "import testbed.cli.app, testbed.plugin, testbed.lab.session, testbed.lab.runner, testbed.infra.stack\n"
            "import workers.userjob, workers.handler, workers.worker, workers.zygote",
            {"langgraph", "langchain_core", "dbos", "pydantic_ai", "pydantic_graph", "agents", "openai"}
            | {"celery", "kombu", "billiard", "temporalio"},
        ),
    ],
    ids=["command line", "provider", "optional runtimes"],
)
def test_a_runs_start_leaves_heavy_imports_for_later(start: str, later: set[str]) -> None:
    """redis-py's import costs 70 to 100 ms of CPU, rich's about 40, importlib.metadata's
    15 to 25 (with the email package): they wait until used, and the provider needs no web framework at all."""
    code = f"{start}\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith({tuple(later)})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_command_line_runs_with_collection_on_and_its_imports_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is collected while the command line imports (its start's CPU); the command itself collects."""
    import testbed.cli.app

    seen = []
    monkeypatch.setattr(atexit, "register", lambda _: None)
    monkeypatch.setattr(testbed.cli.app, "main", lambda: seen.append((gc.isenabled(), gc.get_freeze_count())))
    gc.unfreeze()
    entry.main()
    ((enabled, frozen),) = seen
    assert enabled and frozen > 0


def test_the_provider_serves_with_collection_on_and_its_start_frozen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`python -m provider` makes its store and service with no collection: it serves collecting."""
    import provider.__main__
    import provider.server

    seen = []
    monkeypatch.setattr(
        provider.server.Server, "run", lambda *_, **__: seen.append((gc.isenabled(), gc.get_freeze_count()))
    )
    monkeypatch.setattr(sys, "argv", ["provider", "--port", "0", "--db", str(tmp_path / "log.sqlite3")])
    gc.unfreeze()
    provider.__main__.main()
    ((enabled, frozen),) = seen
    assert enabled and frozen > 0
