"""A private PostgreSQL server for a test: its own data dir and unix socket, stopped afterwards.

PostgreSQL refuses to run as root: as root, the server runs as `nobody` in a
directory that user can write.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from labcore.procs import stop

NOBODY = 65534


def binaries() -> str | None:
    """The folder of initdb and postgres, if PostgreSQL is installed."""
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(os.path.realpath(found))
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(candidates[-1]) if candidates else None


@contextmanager
def private_postgres() -> Iterator[str]:
    """Start a server; yield its DATABASE_URL."""
    import psycopg

    bin_dir = binaries()
    assert bin_dir is not None, "PostgreSQL is not installed"
    root = tempfile.mkdtemp(prefix="testbed-pg-")
    as_user = NOBODY if os.geteuid() == 0 else None  # the user and group the server runs as (None: ours)
    if as_user is not None:
        os.chmod(root, 0o777)
    data, port = os.path.join(root, "data"), 5432
    url = f"postgresql://postgres@/postgres?host={root}&port={port}"
    server = None
    try:
        subprocess.run(
            [f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "postgres"],
            check=True,
            capture_output=True,
            user=as_user,
            group=as_user,
        )
        argv = [f"{bin_dir}/postgres", "-D", data, "-k", root, "-p", str(port), "-c", "listen_addresses="]
        with open(os.path.join(root, "server.log"), "wb") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, user=as_user, group=as_user)
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(url).close()
                break
            except psycopg.OperationalError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        if server is not None:
            stop(server)  # SIGTERM: PostgreSQL's smart shutdown
        shutil.rmtree(root, ignore_errors=True)
