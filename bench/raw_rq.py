"""Raw RQ as a whole program: start a private Redis and plain `rq worker`
processes (the lab's worker class: `throughput.raw_rq`), drain no-op jobs,
stop everything.

    python bench/raw_rq.py OPS WORKERS [FLOOR_URL]

With FLOOR_URL (a bare server's), the jobs are `floor_job.attempt`'s.

`bench/article_speed.py` times this process as it times `testbed chaos`, from
the interpreter's start to its exit, so both sides pay for starting Python,
their imports, their stack and its teardown.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from throughput import raw_rq


def main() -> None:
    ops, workers = int(sys.argv[1]), int(sys.argv[2])
    floor = sys.argv[3] if len(sys.argv) > 3 else None
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        raw_rq(ops, workers, work, whole=True, floor=floor)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
