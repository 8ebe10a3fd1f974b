"""A redis-server for labs across hosts (`testbed redis`): on the network, with a password.

The password comes from the environment and the settings reach redis-server
on its standard input (`redis-server -`): it appears on no command line and
in no file. The process becomes redis-server (exec), so signals reach it
directly, as a container's main process should.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

from testbed.infra.redis_server import _quoted, find_binary

PASSWORD_ENV = "TESTBED_REDIS_PASSWORD"


def settings(bind: str, port: int, password: str, datadir: Path) -> str:
    lines = [f"requirepass {password}", f"bind {bind}", f"port {port}", "protected-mode yes"]
    # The lab's data lives for one run: nothing to persist.
    lines += ['save ""', "appendonly no", "daemonize no", f"dir {_quoted(str(datadir))}"]
    return "\n".join(lines) + "\n"


def exec_redis(bind: str, port: int, password: str, datadir: Path) -> NoReturn:
    binary = find_binary()
    read, write = os.pipe()
    os.write(write, settings(bind, port, password, datadir).encode())  # a few hundred bytes: fits the pipe
    os.close(write)
    os.dup2(read, 0)
    os.close(read)
    os.execv(binary, [binary, "-"])
