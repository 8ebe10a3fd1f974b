"""A user's job module that does not import."""

import a_module_that_is_not_installed  # noqa: F401


def send(op_id: str, payload: dict) -> None:
    pass
