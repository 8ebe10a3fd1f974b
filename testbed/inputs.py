"""Files the lab reads from the user (a schedule) and back from its store: bounded.

Whatever a path names, the lab reads only a regular file (never a FIFO, a device
or a directory, which would hang it or never end), at most `cap` bytes of it, or
of a file it reads a line at a time at most `line_cap` bytes a line, and parses
JSON no deeper than `MAX_DEPTH`, so that no input costs a traceback, all the
memory or for ever; and an error line quotes at most `QUOTED` characters of
what it was given.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

# Bytes, by default: a schedule is a few hundred, a stored run's results.json a few MB.
CAP = 64 << 20
# Nesting of arrays and objects in a JSON file the lab reads: its own formats nest a few levels.
MAX_DEPTH = 64
# Bytes of a line of a file read a line at a time: the lab's own lines are a few hundred.
LINE_CAP = 1 << 20
QUOTED = 200  # characters of an input an error line repeats at most


class InputError(ValueError):
    """A file the lab cannot read as it must: one line saying why."""


def quoted(text: str, limit: int = QUOTED) -> str:
    """`text` as an error line may repeat it: one line, at most `limit` characters."""
    flat = text.encode("unicode_escape").decode("ascii") if any(c in text for c in "\r\n") else text
    return flat if len(flat) <= limit else f"{flat[:limit]}... ({len(flat):,} characters)"


def read_bytes(path: Path, cap: int = CAP) -> bytes:
    """The whole of a regular file of at most `cap` bytes; InputError says why not."""
    with opened(path, cap) as file:
        data = file.read(cap + 1)
    if len(data) > cap:  # it grew while it was read
        raise InputError(f"over the {cap:,} bytes the lab reads")
    return data


def lines(path: Path, line_cap: int = LINE_CAP) -> Iterator[tuple[int, bytes]]:
    """Each line of a regular file of any size, and its number, a line at a time (memory stays
    flat), none longer than `line_cap` bytes: InputError, as it is reached, where one is (a
    file of zeros has no line end at all)."""
    with opened(path) as file:
        for number, line in enumerate(iter(lambda: file.readline(line_cap + 1), b""), 1):
            if len(line) > line_cap:
                raise InputError(f"line {number} is longer than the {line_cap:,} bytes the lab reads of a line")
            yield number, line


def opened(path: Path, cap: int | None = None) -> IO[bytes]:
    """A regular file (of at most `cap` bytes, None: any size), opened to read; InputError
    says why not, without waiting (a FIFO) or reading (a device)."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(exc.strerror or str(exc)) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise InputError(f"{kind(info.st_mode)}, not a regular file")
    if cap is not None and info.st_size > cap:
        os.close(fd)
        raise InputError(f"{info.st_size:,} bytes, over the {cap:,} the lab reads")
    return os.fdopen(fd, "rb")


def kind(mode: int) -> str:
    """What a file of this mode (os.stat's st_mode) is, as an error line names it."""
    return _KINDS.get(stat.S_IFMT(mode), "something else")


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """JSON, nested at most `max_depth` deep (a deeper document would exhaust Python's stack)."""
    if _depth(text) > max_depth:
        raise InputError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not JSON: {exc}") from None


def _depth(text: str | bytes) -> int:
    """How deep the document's arrays and objects nest, outside its strings."""
    data = text.encode() if isinstance(text, str) else text
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", data)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


_KINDS = {
    stat.S_IFREG: "a regular file",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFSOCK: "a socket",
}
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")
