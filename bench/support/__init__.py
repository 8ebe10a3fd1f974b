"""What the benchmarks share, and what the queues' workers they start import, with the project's
root on their path: the tasks and worker classes (`bench.support.noop_task`,
`bench.support.timed_worker.TimedWorker`), and the jobs, by these names but for raw RQ's no-op job
(`raw_rq.NOOP`). Empty: raw RQ's program imports nothing it does not use."""
