"""Worked examples: users' own jobs, each run by `testbed chaos --handler examples.<module>:send`."""
