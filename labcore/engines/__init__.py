"""Each engine's part of the shared core, one module each: the delivery settings its cells run
under, as pure tables the lab, its workers and the model all read (`labcore.delivery` names
them all). Nothing here imports an engine's own libraries."""
