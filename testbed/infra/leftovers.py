"""What a run leaves if it dies without cleaning up, and how it is found again.

Every run's temp dir carries an `owner` file (the pid and start time of the
testbed process). A dir whose owner is gone belongs to no live run: the next
run, or `testbed clean`, removes it; a dir kept on purpose (`--keep`) only
`testbed clean` removes. A live run's dir is never touched.

On a shared Redis a run's keys carry an owner key that the run keeps alive
with a heartbeat. A run whose owner key is gone died without cleaning up:
`testbed clean --redis-url` removes its keys. Keys kept on purpose expire
after KEPT_SECONDS, the owner key with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from labcore.keys import RUNS_PREFIX, RunKeys

if TYPE_CHECKING:
    import redis as redis_lib

PREFIX = "testbed-"
_OWNER = "owner"
KEPT_SECONDS = 7 * 86_400
_OWNER_TTL = 60  # seconds an owner key outlives its run's last heartbeat
_BEAT_EVERY = 10.0


def _me(kept: bool = False) -> dict[str, object]:
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "created": me.create_time(), "kept": kept}


def claim(workdir: Path, kept: bool = False) -> None:
    """Mark a temp dir as this process's (and, if kept, as kept on purpose)."""
    (workdir / _OWNER).write_text(json.dumps(_me(kept)))


def _owner(workdir: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads((workdir / _OWNER).read_text())
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def owner_alive(workdir: Path) -> bool:
    owner = _owner(workdir)
    try:
        return owner is not None and psutil.Process(owner["pid"]).create_time() == owner["created"]
    except (KeyError, TypeError, psutil.Error):
        return False


def stale_dirs(root: Path | None = None, kept: bool = False) -> list[Path]:
    """Temp dirs of runs whose testbed process is gone (only dirs this lab marked);
    those kept on purpose only if `kept`."""
    base = Path(root or tempfile.gettempdir())
    found = []
    for path in base.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            ours = path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid()
            owner = _owner(path) if ours else None
            if owner is not None and not owner_alive(path) and (kept or not owner.get("kept")):
                found.append(path)
    return found


def remove_stale_dirs(root: Path | None = None, kept: bool = False) -> list[Path]:
    removed = stale_dirs(root, kept)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


class KeyOwnership:
    """A run's claim on its keys in a shared Redis: an owner key kept alive while the run is."""

    def __init__(self, redis: redis_lib.Redis, keys: RunKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._beat = 0.0

    def claim(self) -> None:
        self._redis.set(self._keys.owner, json.dumps(_me()), ex=_OWNER_TTL)
        self._beat = time.monotonic()

    def beat(self) -> None:
        if time.monotonic() - self._beat > _BEAT_EVERY:
            self._redis.expire(self._keys.owner, _OWNER_TTL)
            self._beat = time.monotonic()

    def keep(self) -> None:
        """Kept on purpose: every key of the run expires after KEPT_SECONDS, the owner key too."""
        self._redis.set(self._keys.owner, json.dumps(_me(kept=True)))
        with self._redis.pipeline(transaction=False) as pipe:
            for key in self._redis.scan_iter(match=self._keys.pattern, count=1000):
                pipe.expire(key, KEPT_SECONDS)
            pipe.execute()


def ownerless_runs(redis: redis_lib.Redis) -> dict[str, int]:
    """Run prefixes in a shared Redis whose owner key is gone, with their key counts."""
    counts: dict[str, int] = {}
    for key in redis.scan_iter(match=f"{RUNS_PREFIX}:*", count=1000):
        prefix = ":".join(key.decode(errors="replace").split(":", 2)[:2])
        counts[prefix] = counts.get(prefix, 0) + 1
    return {prefix: n for prefix, n in counts.items() if not redis.exists(RunKeys(prefix).owner)}


def delete_keys(redis: redis_lib.Redis, pattern: str) -> None:
    """Only what the run wrote: every key under its prefix."""
    batch = []
    for key in redis.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            redis.unlink(*batch)
            batch.clear()
    if batch:
        redis.unlink(*batch)
