"""The stack a command's run stands on, from the options every run takes (`StackArgs`),
and what results.json says of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labcore.procs import port_in_use
from testbed.cli import checks, hosts
from testbed.cli.options import StackArgs
from testbed.engines.base import RQTimers
from testbed.errors import SetupError, UsageError
from testbed.infra import descriptors
from testbed.infra.stack import StackOptions
from testbed.nemesis.recovery import Recovery

if TYPE_CHECKING:
    from testbed.lab.destination import Reader

MAX_WORKERS = 64
MAX_RQ_SECONDS = 7 * 86_400


def stack_options(args: StackArgs) -> tuple[StackOptions, Recovery]:
    checks.finite("--workers", args.workers, 1, MAX_WORKERS)
    # RQ takes these as seconds for its own timers: past a week they are no setting a run can wait for.
    checks.finite("--worker-ttl", args.worker_ttl, 2, MAX_RQ_SECONDS)
    checks.finite("--maintenance-interval", args.maintenance_interval, 1, MAX_RQ_SECONDS)
    checks.finite("--job-monitoring-interval", args.job_monitoring_interval, 1, MAX_RQ_SECONDS)
    if args.recovery not in ("forced", "rq"):
        raise UsageError(f"unknown recovery {args.recovery!r} (choose from forced, rq)")
    port = args.provider_port
    if not 0 <= port <= 65535:
        raise UsageError(f"--provider-port must be a port number (got {port})")
    if port and port_in_use(port):
        raise SetupError(f"provider port {port} is already in use")
    settings = RQTimers(args.worker_ttl, args.maintenance_interval, args.job_monitoring_interval)
    remote = hosts.remote_options(args)
    if args.redis_private and not args.redis_url:
        raise UsageError("--redis-private needs --redis-url (or $REDIS_URL): the Redis said to be yours alone")
    if remote is None:  # the run starts its processes here: this machine's limit is theirs
        descriptors.ensure(args.workers)
    stack = StackOptions(args.workers, args.redis_url, args.redis_private, port, settings, args.keep, remote)
    return stack, Recovery(args.recovery)


def vars_of(settings: RQTimers) -> dict[str, int]:
    return {
        "workerTtl": settings.worker_ttl,
        "maintenanceInterval": settings.maintenance_interval,
        "jobMonitoringInterval": settings.job_monitoring_interval,
    }


def shared_meta(stack_args: StackArgs, stack: StackOptions) -> dict[str, Any]:
    """What results.json's options say of the stack: its workers, its Redis, its engine, the
    destination's sandbox it started."""
    redis = "shared" if stack_args.redis_url else "private"
    sandbox = {} if stack.sandbox is None else {"destinationCommand": stack.sandbox.spelled}
    return {"workers": stack_args.workers, "redis": redis, **stack.engine.meta(), **sandbox}


def destination_meta(reader: Reader | None) -> dict[str, Any]:
    """What results.json's options say of a real destination, if the run has one, and its reader."""
    return {} if reader is None else {"destination": reader.destination.to_json(), "evidence": reader.spec}
