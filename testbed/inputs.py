"""Files the lab reads from the user (a schedule) and back from its store: bounded.

Whatever a path names, the lab reads only a regular file (never a FIFO, a device
or a directory, which would hang it or never end), at most `cap` bytes of it, and
parses JSON no deeper than `MAX_DEPTH`, so that no input costs a traceback, all
the memory or for ever; and an error line quotes at most `QUOTED` characters of
what it was given.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

# Bytes, by default: a schedule is a few hundred, a stored run's results.json a few MB.
CAP = 64 << 20
# Nesting of arrays and objects in a JSON file the lab reads: its own formats nest a few levels.
MAX_DEPTH = 64
QUOTED = 200  # characters of an input an error line repeats at most


class InputError(ValueError):
    """A file the lab cannot read as it must: one line saying why."""


def quoted(text: str, limit: int = QUOTED) -> str:
    """`text` as an error line may repeat it: one line, at most `limit` characters."""
    flat = text.encode("unicode_escape").decode("ascii") if any(c in text for c in "\r\n") else text
    return flat if len(flat) <= limit else f"{flat[:limit]}... ({len(flat):,} characters)"


def read_bytes(path: Path, cap: int = CAP) -> bytes:
    """The whole of a regular file of at most `cap` bytes; InputError says why not."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(exc.strerror or str(exc)) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InputError("not a regular file")
        if info.st_size > cap:
            raise InputError(f"{info.st_size:,} bytes, over the {cap:,} the lab reads")
        data = file.read(cap + 1)
    if len(data) > cap:  # it grew while it was read
        raise InputError(f"over the {cap:,} bytes the lab reads")
    return data


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


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")
