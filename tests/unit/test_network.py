"""The partition's routing rules as data (testbed.host.network); applied on hosts of their own in test_hosts."""

import pytest

from testbed.host.network import CUT_IN, CUT_OUT, LOCAL_MOVED, Peer, cut_commands, heal_commands

UNTOUCHED = [
    {"priority": 0, "src": "all", "table": "local"},
    {"priority": 32766, "src": "all", "table": "main"},
    {"priority": 32767, "src": "all", "table": "default"},
]
CUT = [
    {"priority": CUT_IN, "src": "10.0.0.2", "ipproto": "tcp", "sport": 8080, "action": "blackhole"},
    {"priority": CUT_OUT, "dst": "10.0.0.2", "ipproto": "tcp", "dport": 8080, "action": "blackhole"},
    {"priority": LOCAL_MOVED, "src": "all", "table": "local"},
    *UNTOUCHED[1:],
]


def test_a_cut_drops_the_providers_port_both_ways_before_the_local_rule_accepts_it() -> None:
    commands = [" ".join(c) for c in cut_commands(Peer("10.0.0.2", 8080))]
    assert commands == [
        "ip -4 rule add pref 1 from 10.0.0.2 ipproto tcp sport 8080 blackhole",
        "ip -4 rule add pref 2 to 10.0.0.2 ipproto tcp dport 8080 blackhole",
        "ip -4 rule add pref 3 lookup local",
        "ip -4 rule del pref 0 lookup local",  # last: the moved copy already accepts local traffic
    ]
    assert cut_commands(Peer("fd00::2", 80))[0][:2] == ["ip", "-6"]


def test_healing_puts_local_back_in_front_first_then_removes_the_cut() -> None:
    assert [" ".join(c) for c in heal_commands("-4", CUT)] == [
        "ip -4 rule add pref 0 lookup local",
        "ip -4 rule del pref 3 lookup local",
        "ip -4 rule del pref 1 from 10.0.0.2 ipproto tcp sport 8080 blackhole",
        "ip -4 rule del pref 2 to 10.0.0.2 ipproto tcp dport 8080 blackhole",
    ]


@pytest.mark.parametrize(
    "rules",
    [
        UNTOUCHED,
        # A host's own rules at the cut's prefs that are not blackholes of TCP are not the lab's.
        [*UNTOUCHED, {"priority": CUT_IN, "src": "10.9.0.0/16", "table": "vpn"}],
    ],
)
def test_nothing_to_heal_changes_nothing(rules: list[dict[str, object]]) -> None:
    assert heal_commands("-4", rules) == []


def test_a_cut_left_half_made_is_healed_too() -> None:
    half = [UNTOUCHED[0], CUT[0], *UNTOUCHED[1:]]
    assert [" ".join(c) for c in heal_commands("-4", half)] == [
        "ip -4 rule del pref 1 from 10.0.0.2 ipproto tcp sport 8080 blackhole"
    ]
