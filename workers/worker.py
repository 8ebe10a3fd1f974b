"""The lab's RQ worker: RQ's own forking Worker, stopping without its shutdown's one-second stall.

A worker's pubsub thread (RQ's commands to it) blocks on its connection. At
shutdown RQ unsubscribes first and trips the thread's flag after: when the
unsubscribe's answer reaches the thread in between, the thread waits again,
for up to 60 s, and RQ's join gives up on it after one second (rq/rq#1613).
In the lab that second came at the end of about every other run. Tripping
the flag first lets the answer end the thread. Nothing else differs from
RQ's Worker: the jobs, their work-horses and RQ's bookkeeping are its own.
"""

from __future__ import annotations

from rq.worker import Worker as RQWorker

CLASS_PATH = f"{__name__}.Worker"  # as RQ names a worker class (--worker-class, RQ_WORKER_CLASS)


class Worker(RQWorker):
    def unsubscribe(self) -> None:
        if self.pubsub_thread:
            self.pubsub_thread.stop()
        super().unsubscribe()
