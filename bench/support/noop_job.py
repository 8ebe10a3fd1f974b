"""The raw-RQ baseline's job: does nothing, so what is measured is RQ itself.

Its workers import it by its plain name, `noop_job.noop`, with this folder on their path
(`raw_rq.NOOP` says why); it imports nothing, so both names are the same code.
"""


def noop() -> None:
    return None
