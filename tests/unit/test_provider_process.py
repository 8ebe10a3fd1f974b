"""The provider's HTTP clients: TLS set up, and certificates verified, exactly where the URL says https."""

import ssl

import httpcore
import httpx

from testbed.infra.provider_process import provider_client


def _tls(url: str) -> ssl.SSLContext:
    with provider_client(url, "t0ken", timeout=1.0) as client:
        assert client.headers["authorization"] == "Bearer t0ken"
        # httpx keeps the context its transport was built with
        transport = client._transport
        assert isinstance(transport, httpx.HTTPTransport)
        pool = transport._pool
        assert isinstance(pool, httpcore.ConnectionPool)
        assert pool._ssl_context is not None
        return pool._ssl_context


def test_an_https_provider_is_verified_against_the_ca_bundle() -> None:
    context = _tls("https://provider.example:8443")
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0


def test_the_runs_plain_http_provider_loads_no_ca_bundle() -> None:
    assert _tls("http://127.0.0.1:8080").cert_store_stats()["x509_ca"] == 0
