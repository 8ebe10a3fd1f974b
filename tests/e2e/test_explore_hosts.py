"""testbed explore across hosts of their own (tests/support/namespaces.py): Redis,
the provider, two worker hosts and the lab, each in a network namespace. Trials
run on both worker hosts, `partition` is drawn and cuts a host off, and a
breach found there is shrunk and confirmed on the same hosts."""

from __future__ import annotations

import json

import pytest

from labcore.faults import Fault
from labcore.schedule import Schedule
from tests.support import namespaces
from tests.support.namespaces import Hosts

pytestmark = pytest.mark.e2e


def test_trials_run_on_both_hosts_and_provider_key_keeps_exactly_once(hosts: Hosts) -> None:
    ran = hosts.lab("explore", "--hosts", "-s", "provider-key", "--budget", "20", "--seed", "13", "--no-store")
    assert ran.returncode == 0, hosts.failed(ran)
    document = json.loads((hosts.workdir("lab") / "explore.json").read_text())
    summary = document["explore"]
    assert (summary["trials"], summary["breaches"], summary["labFailures"]) == (20, 0, 0)
    assert len(namespaces.hosts_of(document["rows"])) == 2
    # Across hosts the provider is not the run's to crash; a host is cut off from it instead.
    faults = document["options"]["faults"]
    assert Fault.PARTITION in faults and Fault.PROVIDER_CRASH not in faults
    cuts = [s for s in summary["coverage"] if s["fault"] == Fault.PARTITION]
    assert sum(s["struck"] for s in cuts) >= 1, summary["coverage"]


def test_the_silent_loss_is_found_shrunk_and_confirmed_across_hosts(hosts: Hosts) -> None:
    ran = hosts.lab("explore", "--hosts", "-s", "record-before", "--seed", "1", "--store", "runs")
    assert ran.returncode == 1, hosts.failed(ran)
    found = json.loads((hosts.workdir("lab") / "explore.json").read_text())["explore"]["counterexample"]
    (strike,) = Schedule.from_json(found["schedule"]).strikes
    assert strike.attempt == 1 and strike.fault is Fault.KILL
    assert (found["found"], found["reproduced"], found["runs"]) == ("breach", 3, 3)
    # Replayed on the hosts too (a partition can only be): `chaos --schedule` itself is tested on one host.
    assert found["replay"].startswith("testbed chaos --schedule runs/") and found["replay"].endswith(" --hosts")


def test_nothing_is_left_afterwards(hosts: Hosts) -> None:
    hosts.down()
    assert hosts.seen and hosts.left() == []
