"""The host daemon: workers for runs on other hosts (see daemon.py)."""
