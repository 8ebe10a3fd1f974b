"""Scoped base URLs: signed per attempt, readable by the provider, useless when altered."""

import pytest

from labcore.scoped import BadScope, Scope, base_url, ledger_secret, read, sign, user_op_id, verify

SECRET = "s" * 32


def test_a_token_carries_the_attempt_and_its_armed_hit() -> None:
    scope = Scope("run.c001", "tenant-demo:notification:7", 2, '{"hit":"c001:7:2:after-effect"}')
    assert verify(sign(scope, SECRET), SECRET) == scope
    assert read(sign(scope, SECRET)).ledger == "run.c001"


def test_the_token_is_url_safe_and_the_base_url_ends_in_it() -> None:
    token = sign(Scope("run.c001", "a:b/c?d", 1), SECRET)
    assert all(ch.isalnum() or ch in "-_." for ch in token)
    assert base_url("http://127.0.0.1:9/", token) == f"http://127.0.0.1:9/s/{token}"


@pytest.mark.parametrize("secret", ["t" * 32, SECRET[:-1]])
def test_another_secret_does_not_verify(secret: str) -> None:
    with pytest.raises(BadScope):
        verify(sign(Scope("l", "op", 1), SECRET), secret)


def test_altered_claims_do_not_verify() -> None:
    token = sign(Scope("l", "op", 1), SECRET)
    other_claims = sign(Scope("l", "other-op", 1), SECRET).split(".")[0]
    with pytest.raises(BadScope):
        verify(other_claims + "." + token.split(".")[1], SECRET)


@pytest.mark.parametrize("token", ["", "garbage", "e30.xyz", "bm90IGpzb24.abc"])
def test_malformed_tokens(token: str) -> None:
    with pytest.raises(BadScope):
        verify(token, SECRET)


def test_the_op_id_a_job_is_given_names_run_cell_and_op() -> None:
    assert user_op_id("20261130-053851-535be7.c008", "tenant-demo:notification:10") == (
        "20261130-053851-535be7.c008:tenant-demo:notification:10"
    )


def test_a_ledgers_secret_is_the_lab_and_the_work_horses_alike_and_its_own() -> None:
    """Each side derives it from the provider's token: none sends it, and one ledger's
    secret signs no other's URLs, nor tells the token."""
    token = "k" * 64
    secret = ledger_secret(token, "run.c001")
    assert secret == ledger_secret(token, "run.c001") and len(secret) >= 16 and token not in secret
    assert secret not in (ledger_secret(token, "run.c002"), ledger_secret("j" * 64, "run.c001"))
