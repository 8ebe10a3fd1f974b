"""What a run leaves if it dies without cleaning up, and how the next one finds it.

Every run's temp dir carries an `owner` file (the pid and start time of the
testbed process). A dir whose owner is gone belongs to no live run: the next
run, or `testbed clean`, removes it. A live run's dir is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import psutil

PREFIX = "testbed-"
_OWNER = "owner"


def claim(workdir: Path) -> None:
    """Mark a temp dir as this process's."""
    me = psutil.Process()
    (workdir / _OWNER).write_text(json.dumps({"pid": me.pid, "created": me.create_time()}))


def owner_alive(workdir: Path) -> bool:
    try:
        owner = json.loads((workdir / _OWNER).read_text())
        return psutil.Process(owner["pid"]).create_time() == owner["created"]
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return False


def stale_dirs(root: Path | None = None) -> list[Path]:
    """Temp dirs of runs whose testbed process is gone (only dirs this lab marked)."""
    base = Path(root or tempfile.gettempdir())
    found = []
    for path in base.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            ours = path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid()
            if ours and (path / _OWNER).exists() and not owner_alive(path):
                found.append(path)
    return found


def remove_stale_dirs(root: Path | None = None) -> list[Path]:
    removed = stale_dirs(root)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
