"""A process's long-lived objects made with Python's collector off, then kept out of its collections.

A process's imports (and what it builds once from them: the provider's app)
make objects that live as long as it does. With the collector on, every
few hundred of them set off a collection that walks the ones made before: a
noticeable part of the command line's, the provider's and the zygote's start,
which is on the path of a run's first cell. Made with it off, then frozen
(`gc.freeze`), they are never walked again, and a forked child's collections
leave the pages it shares with its parent alone, as the gc module advises a
forking server. Stdlib only: the command line enters it before its imports.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def uncollected() -> Iterator[None]:
    """No collection inside; what was made by the end is frozen, and collection resumes."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
