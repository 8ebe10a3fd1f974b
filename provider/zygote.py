"""The provider's zygote: the provider's code imported once, each incarnation of a run's provider forked from it.

    python -m provider.zygote   (started by the run, `testbed.infra.provider_process`; its
                                 environment is the provider's: the bus's URL, with the Redis
                                 password, and the token, never a command line)

A crash the lab makes (`provider-crash`) kills the provider and waits for the
next one before the run goes on: started as a fresh interpreter, that is its
imports, a sixth of a second or more, each time; explore's trials crash it by
the dozen, one trial at a time. Forked from here, the next one starts with all
of it imported (the bus's client too, which a provider otherwise imports at
its first armed request), and opens its store and its server: the run's
listening sockets, which it inherits, as the zygote did.

The wire and the loop are `labcore.zygote`'s; each request's argv is `python -m
provider`'s options, and the child serves as that command does (`provider.__main__`).
"""

from __future__ import annotations

from labcore import zygote
from labcore.collector import uncollected
from labcore.prctl import die_with_the_run
from labcore.zygote import Fork


def main() -> None:
    die_with_the_run()
    with uncollected():  # every incarnation's, for its whole life
        from labcore import connections  # noqa: F401
        from provider import __main__, server  # noqa: F401
    zygote.serve(_become_provider)


def _become_provider(request: Fork) -> None:
    from labcore.prctl import set_name
    from provider import __main__ as command

    set_name(request.name)
    command.main(request.argv)


if __name__ == "__main__":
    main()
