"""The raw-RQ baseline's job: does nothing, so what is measured is RQ itself."""


def noop() -> None:
    return None
