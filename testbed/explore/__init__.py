"""`testbed explore`: random crash schedules on the real stack, shrunk to the
smallest that breaks the promise (or on which the model and the run disagree),
with what they covered. The search and the shrinking are Hypothesis's."""
