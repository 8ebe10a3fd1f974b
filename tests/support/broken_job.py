"""A user's job module that does not import."""

from typing import Any

import a_module_that_is_not_installed  # type: ignore[import-not-found]  # noqa: F401 (the import that fails is the point)


def send(op_id: str, payload: dict[str, Any]) -> None:
    pass
