"""A session: the stack up, the cells run on it, the stack down."""
