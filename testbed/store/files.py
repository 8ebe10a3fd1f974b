"""Every file the lab writes for its user: results.json (`--json` and the run
store's), JUnit XML, the report page and each file of a stored run.

Such a file may go to a directory others can write to (`--json /tmp/...`), so
nothing here opens a name someone else could have made first: a file is
written whole under a temp name nobody can guess, created new (O_CREAT|O_EXCL,
and O_NOFOLLOW besides: a name already taken, a planted symlink included, is
never opened but passed over), written through its own descriptor, and renamed
over its place (`os.replace`). A rename replaces whatever is at the final
name, a symlink too, and never writes through it. Its mode is the one a new
file gets: 0o666 under the user's umask. What a rename must not replace is
refused instead (`occupant`): a name that is not a regular file or a link to
one (a device, a FIFO, a directory: `--json /dev/null`), or a link through
/proc (`/dev/stdout`), which names one of the process's descriptors.

A file written as the run goes (history.jsonl) cannot wait for a rename: it
is created new under its own name (`created`), in the run's own new directory.

A write that fails (a full disk, a read-only file system) is the lab's own
failure, not a finding: `Unwritable`, one line naming the file (exit 3).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from testbed import inputs
from testbed.errors import RunFailure

# A new file only, never through a symlink, not inherited by the processes a run starts.
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MODE = 0o666  # the kernel applies the umask, as to any new file
_HOPS = 40  # links followed at most, as the kernel does
_TRIES = 100  # temp names taken before giving up: with 64 random bits, only a hostile directory takes one


class Unwritable(RunFailure):
    """A file the lab could not write (exit 3): the lab's failure, never a finding about a cell."""

    def __init__(self, path: Path, error: Exception) -> None:
        from testbed.store.formats import shown

        self.path = path
        said = error.strerror if isinstance(error, OSError) and error.strerror else error
        super().__init__(f"cannot write {shown(path)}: {said}")


def temp_name(path: Path) -> Path:
    """A name beside `path` that nobody can guess."""
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


def created(path: Path, buffering: int = -1) -> TextIO:
    """`path` made new and opened for writing text: Unwritable if anything is at that name
    (a symlink included) or the file system refuses it."""
    try:
        return open(os.open(path, _NEW, _MODE), "w", buffering=buffering, encoding="utf-8")
    except OSError as exc:
        raise Unwritable(path, exc) from None


@contextlib.contextmanager
def replaced(path: Path) -> Iterator[BinaryIO]:
    """A file to write `path` through: on leaving, its bytes are on disk and moved to `path`
    in one rename; on an error nothing is left and what was at `path` is unchanged.
    Unwritable for any error of the file system."""
    out, temp = _new_temp(path)
    try:
        with out:
            yield out
            out.flush()
            os.fsync(out.fileno())  # whole on disk before it takes the name (and ENOSPC shows here, not later)
        if (held := occupant(path)) is not None:  # it came there while the file was written
            raise Unwritable(path, ValueError(f"{held}, not a regular file: never replaced"))
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise Unwritable(path, exc) from None
        raise


def occupant(path: Path) -> str | None:
    """What is at `path` that a rename must not replace, in words; None where nothing is, or a
    regular file, or a link to one (a planted link is replaced, never followed)."""
    try:
        mode = os.stat(path).st_mode  # through links
    except OSError:
        return None  # nothing there, or a dangling link: made, or replaced
    if not stat.S_ISREG(mode):
        return inputs.kind(mode)
    hop = path
    for _ in range(_HOPS):
        if not hop.is_symlink():
            return None
        hop = hop.parent / os.readlink(hop)
        if hop.is_relative_to("/proc"):
            return f"a link to a descriptor of the process ({hop})"
    return None


def probe(path: Path) -> None:
    """Unwritable unless a file can be made beside `path` as `replaced` makes it."""
    out, temp = _new_temp(path)
    out.close()
    os.unlink(temp)


def _new_temp(path: Path) -> tuple[BinaryIO, Path]:
    for _ in range(_TRIES):
        temp = temp_name(path)
        try:
            return open(os.open(temp, _NEW, _MODE), "wb"), temp
        except FileExistsError:
            continue  # taken: never opened, whatever it is
        except OSError as exc:
            raise Unwritable(path, exc) from None
    raise Unwritable(path, FileExistsError(f"{_TRIES} temp names beside it were taken"))
