"""What the benchmarks share, and what the queues' workers they start import: the jobs, tasks
and worker classes (`bench.support.noop_job.noop`, `bench.support.timed_worker.TimedWorker`),
with the project's root on their path. Empty: raw RQ's program imports nothing it does not use."""
