"""The nemesis: kills by pid, recovery of abandoned jobs, changes to the world."""
