"""Raw Celery's app (`support/raw_celery.py`): a no-op task, and one that SIGKILLs its own
pool child on its first delivery and does nothing on the next. Nothing of the lab's is
imported: the broker and result backend (one Redis) come from `RAW_CELERY_URL`.

Celery's defaults but for what the lab's workers also turn off (remote control, whose
mailbox costs each worker a queue it polls), so that the baseline pays for nothing the lab
does not. The prefetch stays Celery's own (4 a pool child, where the lab's app reserves 1):
tried both ways, the baseline was no slower with it, with kills or without."""

from __future__ import annotations

import os
import signal

from celery import Celery

URL_ENV = "RAW_CELERY_URL"
QUEUE = "raw"

app = Celery("raw", broker=os.environ[URL_ENV], backend=os.environ[URL_ENV], set_as_current=False)
app.conf.update(task_default_queue=QUEUE, worker_enable_remote_control=False, broker_connection_retry_on_startup=True)


@app.task(name="noop")  # type: ignore[untyped-decorator]  # Celery ships no types
def noop() -> None:
    return None


@app.task(name="die_once", acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]  # Celery ships no types
def die_once(marker: str) -> None:
    """Killed on its first delivery, as a `kill` fault kills the lab's pool child: with
    `reject_on_worker_lost` Celery requeues the message once it notices the child is gone,
    and the marker (created on the first delivery) lets the second one return."""
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return None
    os.kill(os.getpid(), signal.SIGKILL)
