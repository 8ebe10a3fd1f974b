"""A unix-socket URL gives back the path it was made from, whatever the path holds."""

from __future__ import annotations

import pytest

from labcore.endpoints import unix_path, unix_url


@pytest.mark.parametrize(
    "path",
    [
        "/tmp/testbed-20261201-220234-ba76cd-p7wny83m/provider.sock",
        "/tmp/a dir/with%25 a percent/p.sock",
        "/tmp/ünï/cödé/p.sock",
        "/tmp/odd?#&=+/p.sock",
        "/tmp/x%2Fy/p.sock",
        "relative/p.sock",
    ],
)
def test_a_unix_url_names_its_socket_path(path: str) -> None:
    assert unix_path(unix_url(path)) == path
    assert unix_path(unix_url(path) + "/ledgers/x") == path


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "https://provider.test", "http+unixx://%2Ftmp", ""])
def test_any_other_url_names_no_socket(url: str) -> None:
    assert unix_path(url) is None
