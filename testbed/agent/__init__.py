"""The per-host agent: workers for runs on other hosts (see agent.py)."""
