"""A Ctrl-C while the command line is still importing ends as one line, like one during a run."""

import atexit
import gc
import importlib.abc
import subprocess
import sys

import pytest

import testbed.__main__ as entry


class _InterruptedImport(importlib.abc.MetaPathFinder):
    """The Ctrl-C, as it lands in the middle of importing the command line."""

    def find_spec(self, name, path=None, target=None):
        if name == "testbed.cli.app":
            raise KeyboardInterrupt
        return None


def test_a_ctrl_c_during_the_command_lines_imports_is_one_line_and_exit_130(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "testbed.cli.app", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 130
    assert capsys.readouterr().err == "testbed: error: interrupted\n"


def test_the_command_line_leaves_what_it_imported_to_the_processs_exit(monkeypatch):
    """Frozen at exit, the imports' objects are not collected again by the interpreter's teardown."""
    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(sys, "argv", ["testbed", "--version"])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0
    assert registered == [gc.freeze]


def test_a_run_launches_its_processes_before_redis_py_is_imported():
    """What the command line imports before a run launches its provider and workers
    (testbed.lab.session.execute) leaves redis-py out: its import (about 70 ms) would
    hold back the provider's start, the longest part of a run's."""
    before_launch = "testbed.cli.app, testbed.lab.session, testbed.report.tables, testbed.report.live"
    code = f"import sys, {before_launch}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'redis'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
