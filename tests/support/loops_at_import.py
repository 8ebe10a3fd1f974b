"""A module whose import never ends, after starting a process that would outlive it (its pid
in $LEFTOVER_PIDS). Not collected: no test_ prefix."""

import os
import subprocess
import time
from typing import Any

child = subprocess.Popen(["sleep", "600"])
with open(os.path.join(os.environ["LEFTOVER_PIDS"], str(child.pid)), "w"):
    pass
while True:
    time.sleep(1)


def send(op_id: str, payload: dict[str, Any]) -> None:
    """Never reached."""
