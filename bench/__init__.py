"""The benchmarks and profilers: what the lab costs on top of RQ and Celery (README.md here).

Run from the project's root as modules, `python -m bench.throughput`, `python -m
bench.profile.job_profile`. Nothing of the lab imports this package (pyproject.toml's
import contracts); the processes a benchmark starts import its helpers by these names.
"""
