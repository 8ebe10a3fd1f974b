"""The two ways a run can fail before it has anything to report."""


class SetupError(Exception):
    """Bad input or an environment the run cannot start in (exit 2)."""


class RunFailure(Exception):
    """A part of the stack misbehaved during the run (exit 3)."""


class UsageError(SetupError):
    """The command line asks for something that does not exist or cannot be run."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: the run was stopped and cleaned up (exit 130)."""
