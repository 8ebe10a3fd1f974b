"""A Ctrl-C while the command line is still importing ends as one line, like one during a run."""

import atexit
import gc
import importlib.abc
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
