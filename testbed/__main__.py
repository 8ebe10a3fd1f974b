"""`python -m testbed`, and the `testbed` command: the command line, entered so that a
Ctrl-C during its imports (the first tenth of a second or two) ends as one line too,
as it does once the command runs (testbed.cli.app). Nothing has started by then."""

import atexit
import gc
import sys

from labcore.collector import uncollected


def main() -> None:
    # Registered first, so run last of the exit's callbacks: the interpreter's teardown
    # would otherwise collect every object the imports made, several times over, on every
    # command; frozen, they are left to the process's exit.
    atexit.register(gc.freeze)
    try:
        with uncollected():  # typer, pydantic, rich: what they make lives as long as the command
            from testbed.cli.app import main as command_line
    except KeyboardInterrupt:
        print("testbed: error: interrupted", file=sys.stderr)
        sys.exit(130)
    command_line()


if __name__ == "__main__":
    main()
