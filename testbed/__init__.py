"""testbed: a crash-test lab for the side effects of agent tool calls and queue jobs."""
