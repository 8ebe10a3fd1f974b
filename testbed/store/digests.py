"""digests.json: the sha256 of every file a stored run holds, written as the run's last
write, and checked before anything reads the run back (`testbed check`, `report`, `compare`).

The run's directory is walked as it is, not as `testbed.store.layout` lists it, so that a
file the lab comes to store (a destination's evidence, say) is covered without a change
here. Left out: the manifest itself, the report page, a view that `testbed report` writes
again from results.json at any time, and temp names (`*.tmp`): nothing reads them back.

It tells an edit or an accident (a file changed, cut short, removed, added, or put in
place as a link) from the run as it was stored; it is not a signature: with no key, whoever
can write the run can write its manifest again.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from testbed import inputs
from testbed.errors import UsageError
from testbed.store import files
from testbed.store.layout import DIGESTS, REPORT

ALGORITHM = "sha256"
_CHUNK = 1 << 20
_UNDIGESTED = frozenset({DIGESTS, REPORT})
_MANIFEST_BYTES = 16 << 20  # a line per file; a run stores a few dozen


@dataclass(frozen=True, slots=True)
class Digests:
    """Each file of a run (its path below the run, with /) and its digest."""

    files: dict[str, str]

    def encode(self) -> bytes:
        return json.dumps({"algorithm": ALGORITHM, "files": self.files}, indent=1, sort_keys=True).encode() + b"\n"


class Unverified(UsageError):
    """A stored run whose files are not the ones it stored (exit 2, as a damaged file is)."""


def write(run: Path) -> None:
    """The manifest of every file now in `run`, written as every stored file is (Unwritable if it cannot be)."""
    found = Digests({name: _digest(path) for name, path in _walk(run)})
    with files.replaced(run / DIGESTS) as out:
        out.write(found.encode())


def verify(run: Path) -> bool:
    """Whether `run` has a manifest (False: stored before there were any); Unverified, one line
    naming the file, where a file is not as the run stored it."""
    from testbed.store.formats import shown

    manifest = run / DIGESTS
    if not os.path.lexists(manifest):
        return False
    stored = _read(manifest, shown(manifest))
    present = dict(_walk(run, strict=True))
    for name, digest in sorted(stored.files.items()):
        if name not in present:
            raise Unverified(f"{shown(run / name)} is missing: the run stored it ({DIGESTS} lists it)")
        if _digest(present[name]) != digest:
            raise Unverified(
                f"{shown(run / name)} is not as the run stored it: its {ALGORITHM} differs from {DIGESTS}'s"
            )
    if added := sorted(set(present) - set(stored.files)):
        raise Unverified(f"{shown(run / added[0])} was not stored by the run: {DIGESTS} does not list it")
    return True


def _read(manifest: Path, shown: str) -> Digests:
    try:
        document = inputs.loads(inputs.read_bytes(manifest, _MANIFEST_BYTES))
    except inputs.InputError as exc:
        raise Unverified(f"cannot read {shown}: {exc}") from None
    listed = document.get("files") if isinstance(document, dict) else None
    if (
        not isinstance(document, dict)
        or document.get("algorithm") != ALGORITHM
        or not isinstance(listed, dict)
        or not all(isinstance(n, str) and _inside(n) and isinstance(d, str) for n, d in listed.items())
    ):
        raise Unverified(f"{shown} is not a manifest of {ALGORITHM} digests, as the run writes it")
    return Digests(listed)


def _inside(name: str) -> bool:
    """A path below the run, as `_walk` names one."""
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and name == str(path) != "."


def _walk(run: Path, strict: bool = False) -> list[tuple[str, Path]]:
    """Every file below `run` (its name with /, its path), but the manifest and the report; with
    `strict`, Unverified for what the lab never stores there (a link, a FIFO, a device)."""
    from testbed.store.formats import shown

    found = []
    for top, dirs, names in os.walk(run):
        for name in [*names, *dirs]:
            path = Path(top, name)
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            relative = path.relative_to(run).as_posix()
            if relative in _UNDIGESTED or _is_temp(name):
                continue
            if not stat.S_ISREG(mode):
                if strict:
                    raise Unverified(f"{shown(path)}: {inputs.kind(mode)}, not a file the run stored")
                continue
            found.append((relative, path))
    return found


def _is_temp(name: str) -> bool:
    """A temp name: the one `testbed.store.files` writes a file under before it takes its own
    (`.name.<random>.tmp`), or an older lab's (`name.tmp`). Nothing reads one back."""
    return name.endswith(".tmp")


def _digest(path: Path) -> str:
    """A regular file's digest, read in chunks (memory stays flat however large it is)."""
    from testbed.store.formats import shown

    try:
        with inputs.opened(path) as file:
            digest = hashlib.new(ALGORITHM)
            for chunk in iter(lambda: file.read(_CHUNK), b""):
                digest.update(chunk)
            return digest.hexdigest()
    except inputs.InputError as exc:
        raise Unverified(f"cannot read {shown(path)}: {exc}") from None
