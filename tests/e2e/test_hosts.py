"""The lab on hosts of their own (tests/support/namespaces.py): five Linux network
namespaces running compose.yaml's services, Redis on one, the provider on another,
a host on each of two more, the lab on the fifth.

Checks: the article's 12 cells equal a single-host run's, and the stored run
is judged again from what the provider said of its ops; a kill-worker replay
whose jobs come back on the other worker host; the partition fault (an
host cuts its host off from the provider), timeout and late as the model
predicts; every scenario across hosts as the model predicts; the provider refuses a request
without its token (401) and changes nothing; Redis refuses a client without
the password; nothing is left afterwards (processes, namespaces).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from testbed.experiment.scenarios import SCENARIOS
from testbed.report import html
from testbed.store import results
from testbed.store.layout import PROVIDER_LOG, PROVIDER_RECORDS
from tests.support import compose
from tests.support.dom import parse
from tests.support.helpers import Ran
from tests.support.namespaces import Hosts
from tests.support.report_page import assert_cell_timeline, label_of

pytestmark = pytest.mark.e2e

SERVICES_RUN = ("redis", "provider", "host", "lab")  # every service of compose.yaml, as written there
_CELL = ("strategy", "boundary", "fault", "effects", "duplicateEffects", "missingOperations", "kills", "verdict")

# Run on the lab's host once the stack is up: what Redis and the provider refuse.
PROBE = r"""
import json, os, socket
import httpx, redis
purl = os.environ["TESTBED_PROVIDER_URL"]
auth = {"Authorization": "Bearer " + os.environ["TESTBED_PROVIDER_TOKEN"]}
out = {}
try:
    redis.Redis(host="redis", port=6379, socket_connect_timeout=2).ping()
    out["redisOpen"] = True
except redis.RedisError as exc:
    out["redisOpen"], out["redisError"] = False, str(exc)
with socket.create_connection(("redis", 6379), timeout=2) as raw:  # RESP2, as any client speaks it
    raw.sendall(b"PING\r\n")
    out["rawPing"] = raw.recv(200).decode()
ledger, body = "probe-ledger", {"reference": "r1", "recipient": "a@example.com", "message": "m"}
out["putNoToken"] = httpx.put(purl + "/ledgers/" + ledger, json={}).status_code
out["sendNoToken"] = httpx.post(purl + "/ledgers/" + ledger + "/effects", json=body).status_code
out["lookupAfter"] = httpx.get(purl + "/ledgers/" + ledger + "/effects/r1", headers=auth).status_code
out["auditAfter"] = httpx.post(purl + "/ledgers/" + ledger + "/audit", json={"references": ["r1"]}, headers=auth).json()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(hosts: Hosts) -> dict[str, Any]:
    ran = hosts.run("lab", [sys.executable, "-c", PROBE], "lab", timeout=60)
    assert ran.returncode == 0, hosts.failed(ran)
    probed: dict[str, Any] = json.loads(ran.stdout)
    return probed


@pytest.fixture(scope="module")
def lab_run(hosts: Hosts) -> subprocess.CompletedProcess[str]:
    """compose.yaml's lab service, on the lab's host."""
    ran = hosts.run("lab", compose.argv("lab"), "lab", timeout=240)
    assert ran.returncode == 0, hosts.failed(ran)
    return ran


def test_redis_refuses_a_client_without_the_password(probe: dict[str, Any]) -> None:
    assert probe["redisOpen"] is False
    assert "authenticat" in probe["redisError"].lower()
    assert probe["rawPing"].startswith("-NOAUTH")


def test_provider_refuses_a_request_without_the_token_and_changes_nothing(probe: dict[str, Any]) -> None:
    assert (probe["putNoToken"], probe["sendNoToken"]) == (401, 401)
    # The refused PUT made no ledger, the refused send logged nothing.
    assert probe["lookupAfter"] == 404
    assert probe["auditAfter"] == {"effects": 0, "records": {}}


def test_article_cells_across_hosts_equal_the_single_host_run(
    hosts: Hosts, lab_run: subprocess.CompletedProcess[str], default_chaos: Ran
) -> None:
    across = json.loads((hosts.workdir("lab") / "results.json").read_text())
    assert across["options"]["redis"] == "shared"
    assert default_chaos.code == 0, default_chaos.stderr[-3000:]
    local = default_chaos.json
    cells = [tuple(r[k] for k in _CELL) for r in across["rows"]]
    assert len(cells) == 12
    assert cells == [tuple(r[k] for k in _CELL) for r in local["rows"]]
    # The run's workers were the hosts', and they stopped when the run ended (each host alone in its host).
    assert {r["workers"] for r in across["rows"]} == {4}
    for host in ("worker1", "worker2"):
        assert hosts.pids(hosts.ns(host)) == [hosts.procs[host].pid]


def test_a_run_on_a_network_provider_is_kept_and_judged_again_from_what_the_provider_said(
    hosts: Hosts, lab_run: subprocess.CompletedProcess[str]
) -> None:
    stored = (hosts.workdir("lab") / "runs" / "latest").resolve()
    assert (stored / PROVIDER_RECORDS).is_file() and not (stored / PROVIDER_LOG).exists()  # its log stays on its host
    check = [*compose.argv("lab")[:3], "check"]
    ran = hosts.run("lab", [*check, "latest", "--store", "runs"], "lab", timeout=60)
    assert ran.returncode == 0, hosts.failed(ran)
    assert "12/12 cells as expected" in ran.stdout
    # One effect fewer in what the provider said of one op: the check names that op.
    altered = hosts.workdir("lab") / "altered"
    shutil.copytree(stored, altered)
    lines = [json.loads(line) for line in (altered / PROVIDER_RECORDS).read_text().splitlines()]
    op, record = next((op, r) for line in lines for op, r in line["records"].items() if r["effects"] == 1)
    record["effects"] = 0
    (altered / PROVIDER_RECORDS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    ran = hosts.run("lab", [*check, str(altered)], "lab", timeout=60)
    assert ran.returncode == 2 and "provider-records.jsonl is not as the run stored it" in ran.stderr
    (altered / "digests.json").unlink()  # as a run stored before runs had digests: judged as it is now
    ran = hosts.run("lab", [*check, str(altered)], "lab", timeout=60)
    assert ran.returncode == 1, hosts.failed(ran)
    assert "DIFFERS" in ran.stdout and op in ran.stdout


def test_kill_worker_replay_comes_back_on_the_other_worker_host(
    hosts: Hosts, lab_run: subprocess.CompletedProcess[str]
) -> None:
    # 12 kills: the chance that no job crosses to the other host is about (1/2)^12.
    argv = [*compose.argv("lab")[:3], "replay", "--hosts", "--fault", "kill-worker", "--ops", "48", "--every", "4"]
    ran = hosts.run("lab", [*argv, "--no-store", "--json", "replay.json"], "lab", timeout=180)
    assert ran.returncode == 0, hosts.failed(ran)
    row = json.loads((hosts.workdir("lab") / "replay.json").read_text())["rows"][0]
    assert (row["kills"], row["effects"], row["duplicateEffects"], row["missingOperations"]) == (12, 48, 0, 0)
    crossed = 0
    for events in row["history"].values():
        killed = next(e for e in events if e["event"] == "killed")
        second = next(e for e in events if e["event"] == "attempt-start" and e["attempt"] == 2)
        assert len(killed["pids"]) == 2 and killed["confirmedMs"] >= 0  # worker and work-horse, by its host
        crossed += killed["worker"].rsplit(".", 1)[0] != second["worker"].rsplit(".", 1)[0]
    assert crossed >= 1, "no killed job came back on the other worker host"


def test_partition_timeout_and_late_across_hosts_agree_with_the_model(
    hosts: Hosts, lab_run: subprocess.CompletedProcess[str]
) -> None:
    """Each partitioned op's host is cut off from the provider by its host; the provider's
    answer goes into the cut and the client times out. Exit 0: every count as the
    model predicts (for a partition, as for a timeout, which runs beside it, with late)."""
    faults = ["--fault", "partition", "--fault", "timeout", "--fault", "late"]
    argv = [*compose.argv("lab")[:3], "chaos", "--hosts", *faults, "--ops", "20"]
    ran = hosts.run("lab", [*argv, "--no-store", "--json", "partition.json"], "lab", timeout=240)
    assert ran.returncode == 0, hosts.failed(ran)
    rows = json.loads((hosts.workdir("lab") / "partition.json").read_text())["rows"]
    assert {r["fault"] for r in rows if r["boundary"] != "none"} == {"partition", "timeout", "late"}
    cut = [r for r in rows if r["fault"] == "partition"]
    assert len(cut) == 8 and all(r["faults"] == 2 and r["kills"] == 0 for r in cut)
    for row in cut:
        partitioned = {op: events for op, events in row["history"].items() if _has(events, "partitioned")}
        assert len(partitioned) == row["faults"], row["history"]
        for op, events in partitioned.items():
            cut_at = next(e for e in events if e["event"] == "partitioned")
            timed_out = next(e for e in events if e["event"] == "call-timeout" and e["attempt"] == cut_at["attempt"])
            healed = next(e for e in events if e["event"] == "healed")
            retry = next(e for e in events if e["event"] == "attempt-start" and e["attempt"] == cut_at["attempt"] + 1)
            # The provider was done with the request (after the effect: it had answered) before the client gave
            # up: the answer was lost in the cut. The host was back before the op's next attempt.
            assert cut_at["letGo"] < timed_out["at"] < healed["at"] < retry["at"], (op, events)
            assert cut_at["host"] == cut_at["worker"].rsplit(".", 1)[0]
    # The report draws each cut on its op's row, as what it is
    page = parse(html.render(results.parse((hosts.workdir("lab") / "partition.json").read_bytes())))
    for row in cut:
        figure = page.one("figure", "cell-timeline", data_cell=label_of(row))
        assert_cell_timeline(figure, row)
        assert len(figure.find_all("g", "cut")) == row["faults"]
    # Healed: both worker hosts reach the provider again, and no cut rule is left on either.
    for host in ("worker1", "worker2"):
        rules = hosts.run(host, ["ip", "rule", "show"], "host", timeout=10).stdout
        assert "blackhole" not in rules and rules.startswith("0:"), rules


def test_every_scenario_across_hosts_agrees_with_the_model(
    hosts: Hosts, lab_run: subprocess.CompletedProcess[str]
) -> None:
    """The scenarios' world changes go over the network too: the provider's admin
    routes (expired keys, withdrawals), a duplicate job racing a held request, a
    re-minted op. Exit 0: every cell as the model predicts."""
    scenarios = [name for name in SCENARIOS if name != "none"]
    argv = [*compose.argv("lab")[:3], "chaos", "--hosts", "--matrix", "full", "--ops", "10"]
    argv += [arg for name in scenarios for arg in ("--scenario", name)]
    ran = hosts.run("lab", [*argv, "--no-store", "--json", "scenarios.json"], "lab", timeout=240)
    assert ran.returncode == 0, hosts.failed(ran)
    rows = json.loads((hosts.workdir("lab") / "scenarios.json").read_text())["rows"]
    assert {r["scenario"] for r in rows} == set(scenarios)
    assert all(r["verdict"] == "pass" for r in rows)
    assert all(r["faults"] >= 1 for r in rows if r["boundary"] != "none")


def _has(events: list[dict[str, Any]], kind: str) -> bool:
    return any(e["event"] == kind for e in events)


def test_nothing_is_left_afterwards(hosts: Hosts, lab_run: subprocess.CompletedProcess[str]) -> None:
    hosts.down()
    assert hosts.seen and hosts.left() == []
