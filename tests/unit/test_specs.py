"""Finding a user's job function by name, and the one-line reasons it cannot be used."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workers.specs import TargetError, jobs_env, load, preload, split


def test_a_function_by_module_and_name() -> None:
    assert load("examples.keyed:send").__name__ == "send"
    assert load("workers.specs:TargetError.__init__") is TargetError.__init__


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("examples.keyed", "must be MODULE:FUNCTION"),
        ("examples.keyed:", "must be MODULE:FUNCTION"),
        ("examples.keyed:not-a-name", "must be MODULE:FUNCTION"),
        ("examples.nothing_here:send", "cannot import examples.nothing_here: ModuleNotFoundError: No module named"),
        ("examples.keyed:nope", "examples.keyed has no attribute 'nope'"),
        ("examples.naive:TIMEOUT", "TIMEOUT is not callable (it is a float)"),
    ],
)
def test_what_is_wrong_in_one_line(spec: str, message: str) -> None:
    with pytest.raises(TargetError, match=re.escape(message)) as raised:
        load(spec)
    assert "\n" not in str(raised.value)


def test_a_module_that_fails_at_import_names_its_error(tmp_path: Path) -> None:
    (tmp_path / "boom_job.py").write_text("raise RuntimeError('no DATABASE_URL\\nsecond line')\n")
    with pytest.raises(TargetError) as raised:
        load("boom_job:send", [str(tmp_path)])
    assert str(raised.value) == "handler boom_job:send: cannot import boom_job: RuntimeError: no DATABASE_URL"


def test_the_check_process_exits_2_with_the_cause(tmp_path: Path) -> None:
    (tmp_path / "reads_env_job.py").write_text(
        "import os, sqlite3\nBASE = os.environ['TESTBED_PROVIDER_URL']\ndef send(op_id, payload): pass\nVALUE = 1\n"
    )
    check = [sys.executable, "-m", "workers.importcheck", "--path", str(tmp_path)]
    ok = subprocess.run([*check, "reads_env_job:send"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    libraries = json.loads(ok.stdout)  # for the workers to preload: installed modules, not the user's
    assert "sqlite3" in libraries and "reads_env_job" not in libraries
    bad = subprocess.run([*check, "reads_env_job:send", "reads_env_job:VALUE"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "handler reads_env_job:VALUE: VALUE is not callable (it is a int)"
    assert split("reads_env_job:send") == ("reads_env_job", "send")


def test_the_worker_preloads_libraries_and_skips_what_fails() -> None:
    sys.modules.pop("colorsys", None)
    preload(jobs_env(["a_module_that_is_not_installed", "colorsys"]))
    assert "colorsys" in sys.modules
