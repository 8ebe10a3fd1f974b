"""How long the lab waits for a part of its own (Redis, the provider) to answer.

A paused part (a VM's stolen time, a GC pause, a loaded CI runner) is not a
fault: it is waited out this long. A part that dies is seen at once, by the
run's watch on its process; one stopped for longer ends the run (exit 3),
named. Imported by the workers, the provider's clients and the command line:
nothing here imports anything.
"""

PAUSE_BOUND = 60.0  # seconds
