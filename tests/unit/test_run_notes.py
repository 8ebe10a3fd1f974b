"""What a run says before it starts, from its settings alone."""

from testbed.engines.base import RQTimers
from testbed.engines.rq import recovery_note as rq_recovery_note


def test_replay_under_rqs_own_recovery_says_how_long_it_will_wait() -> None:
    note = rq_recovery_note(RQTimers())
    assert note.startswith("RQ's own recovery brings each killed worker's job back 90 to 690 s after the kill")
    tuned = rq_recovery_note(RQTimers(worker_ttl=20, maintenance_interval=5, job_monitoring_interval=5))
    assert "back 65 to 70 s" in tuned
