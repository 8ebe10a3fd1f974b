"""The run's side of `workers.zygote`: the process that forks the workers, and each worker as a process handle.

A forked worker is the zygote's child, not this process's: its exit comes as
the zygote's report. `ForkedProcess` answers what the run asks of a
`subprocess.Popen` (poll, wait, send_signal, kill, pid, returncode), so the
supervisor, the controller and `labcore.procs.stop_all` treat it as any other
process of the run.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from labcore.procs import spawn
from workers.zygote import Fork, Forked, decode_reply, encode

_ZYGOTE_GONE = -signal.SIGKILL  # its workers die with it (PR_SET_PDEATHSIG)


class Zygote:
    def __init__(self, log: Path, env: dict[str, str]) -> None:
        self.proc = spawn([sys.executable, "-m", "workers.zygote"], log, env=env, piped=True)
        self.log = log
        self._waiting: deque[ForkedProcess] = deque()  # asked for, pid not yet known
        self._running: dict[int, ForkedProcess] = {}
        self._buffer = b""

    def fork(self, name: str, argv: list[str], log: Path) -> ForkedProcess:
        """Asks for a worker and returns at once: its pid is known once the zygote answers
        (after its imports, for the first ones)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(encode(Fork(name, argv, str(log))))
        self.proc.stdin.flush()
        forked = ForkedProcess(self)
        self._waiting.append(forked)
        return forked

    def pump(self, timeout: float) -> None:
        """Reads what the zygote said within `timeout` (0: only what is there now)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return
        data = os.read(self.proc.stdout.fileno(), 65536)
        if not data:  # the zygote is gone, and its workers with it
            self._end_all()
            self.proc.wait()
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            reply = decode_reply(line)
            if isinstance(reply, Forked):
                forked = self._waiting.popleft()
                forked.known_pid = reply.pid
                self._running[reply.pid] = forked
            elif (exited := self._running.pop(reply.pid, None)) is not None:
                exited.returncode = reply.code

    def settle(self, timeout: float = 5.0) -> None:
        """Until every worker asked for is forked: a run stopped during its start hands
        over only processes with a pid. One still not forked by then goes with the zygote."""
        deadline = time.monotonic() + timeout
        while self._waiting and self.proc.poll() is None and time.monotonic() < deadline:
            self.pump(0.05)
        for forked in self._waiting:
            forked.returncode = _ZYGOTE_GONE
        self._waiting.clear()

    def close(self, grace: float = 5.0) -> None:
        """Its stdin closed, it exits (a worker still running dies with it)."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._end_all()

    def _end_all(self) -> None:
        for forked in [*self._waiting, *self._running.values()]:
            forked.returncode = _ZYGOTE_GONE
        self._waiting.clear()
        self._running.clear()


class ForkedProcess:
    """A worker the zygote forked, as the run handles a process it started. Its pid and
    its exit code are set by the zygote's handle as the zygote reports them."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self.known_pid: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        deadline = time.monotonic() + 30
        while self.known_pid is None and self.returncode is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the zygote did not fork a worker within 30 s")
            self._zygote.pump(0.05)
        if self.known_pid is None:
            raise ProcessLookupError("the zygote died before it forked this worker")
        return self.known_pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self._zygote.pump(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(f"worker {self.known_pid}", timeout or 0)
            self._zygote.pump(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
