"""A module that leaves a daemon at import: a child in a session of its own (setsid), forked
again so that its parent is gone, ignoring SIGTERM, its pid in $LEFTOVER_PIDS; then `send` is
not a function, or, with $THEN_LOOP set, the import never ends. Not collected: no test_ prefix."""

import os
import signal
import time

first = os.fork()
if first == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across the exec
    daemon = os.fork()
    if daemon == 0:
        os.execvp("sleep", ["sleep", "600"])
    with open(os.path.join(os.environ["LEFTOVER_PIDS"], str(daemon)), "w"):
        pass
    os._exit(0)
os.waitpid(first, 0)
while os.environ.get("THEN_LOOP"):
    time.sleep(1)

send = 42
