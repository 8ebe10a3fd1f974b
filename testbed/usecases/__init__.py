"""What a front end asks the lab for: a request per kind of run (cells on the stack, a search
of crash schedules), built the same way by the command line and the pytest plugin, checked
whole before anything starts, then prepared into what the lab runs."""
