"""The test broker's TLS listeners, each proven with a plain aiokafka client.

The session's TLS broker (``tls_broker``: ``KAFKA_PORT=P KAFKA_TLS=1 KAFKA_OAUTH_JWKS_URL=...
scripts/kafka-local start`` on free ports: PLAINTEXT P, controller P+1, SASL_PLAINTEXT P+2,
then ssl, mtls, sasl-ssl, oauth, ssl-wrong-host and ssl-expired on P+3 to P+8), started after
the token server whose JWKS it validates tokens against. These
tests check the broker and its material, not the worker: each listener serves a client set up
as a team would, and each piece of bad material fails the way it is meant to, so that the
worker's own tests can rely on it to produce their failures.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError
from aiokafka.helpers import create_ssl_context
from aiokafka.protocol.metadata import MetadataRequest

from scripts.kafka.certs import CLIENT_KEY_PASSWORD
from tests.support.oauth_server import OAuthServer
from tests.support.tls_material import TlsBroker, kafka_local_tls

# One xdist worker runs every module of the session's TLS broker, so it starts once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("tls_broker")]



def tls_context(broker: TlsBroker, cafile: str = "ca.crt", certfile: str | None = None,
                keyfile: str | None = None, password: str | None = None) -> ssl.SSLContext:
    """aiokafka's own context (hostname checking on), from files in the TLS directory."""
    context: ssl.SSLContext = create_ssl_context(
        cafile=broker.file(cafile),
        certfile=broker.file(certfile) if certfile else None,
        keyfile=broker.file(keyfile) if keyfile else None,
        password=password,
    )
    return context


async def round_trip(bootstrap: str, **options: Any) -> bytes:
    """Produce one record to a fresh topic and read it back, both over ``options``."""
    topic = f"tls-{uuid.uuid4().hex[:10]}"
    value = uuid.uuid4().bytes
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=20000,
                                **options)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", **options)
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), timeout=30)
    finally:
        await consumer.stop()
    assert record.value == value
    return value


async def refused(bootstrap: str, **options: Any) -> KafkaError:
    """The error a producer's start raises: the broker (or the TLS handshake) refused it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10000,
                                **options)
    with pytest.raises(KafkaError) as caught:
        await producer.start()
    await producer.stop()
    return caught.value


async def handshake_error(address: str, context: ssl.SSLContext) -> ssl.SSLCertVerificationError:
    """The certificate check a client makes of the broker, alone: the verification error."""
    host, port = address.rsplit(":", 1)

    async def connect() -> None:
        _, writer = await asyncio.open_connection(host, int(port), ssl=context)
        writer.close()

    with pytest.raises(ssl.SSLCertVerificationError) as caught:
        await connect()
    return caught.value


async def undelivered(broker: TlsBroker, **options: Any) -> str:
    """A producer on the oauth listener delivers nothing; what the broker logged meanwhile.

    aiokafka 0.14 cannot be refused cleanly on OAUTHBEARER: when the broker answers the token
    with ``{"status":"invalid_token"}`` (RFC 7628's error challenge, with error code 0), it
    logs "Authenticated via OAUTHBEARER", sends Metadata, and the broker drops the
    connection. So its start may pass with no brokers known, and the failure shows as
    requests that never succeed; the broker's log says why.
    """
    log_before = broker.server_log.stat().st_size
    producer = AIOKafkaProducer(bootstrap_servers=broker.addresses["oauth"],
                                request_timeout_ms=3000, **options)

    async def deliver() -> None:
        await producer.start()
        await asyncio.wait_for(producer.send_and_wait(f"tls-{uuid.uuid4().hex[:8]}", b"v"),
                               timeout=30)

    with pytest.raises(KafkaError):
        await deliver()
    await producer.stop()
    with broker.server_log.open("rb") as log:
        log.seek(log_before)
        return log.read().decode(errors="replace")


class TokenEndpointProvider(AbstractTokenProvider):  # type: ignore[misc]
    """What a client does with OAUTHBEARER: the client-credentials grant at the token
    endpoint, HTTP Basic, one token per call (tests count them)."""

    def __init__(self, oauth: OAuthServer) -> None:
        self._request = urllib.request.Request(  # noqa: S310 (the test's own http:// server)
            oauth.token_url, data=b"grant_type=client_credentials&scope=kafka", method="POST")
        credentials = f"{oauth.client_id}:{oauth.client_secret}"
        self._request.add_header(
            "Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())

    async def token(self) -> str:
        def fetch() -> str:
            with urllib.request.urlopen(self._request, timeout=10) as reply:  # noqa: S310
                return str(json.load(reply)["access_token"])
        return await asyncio.to_thread(fetch)


class FixedTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """Always the same token: what a client that never refreshes would send."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self) -> str:
        return self._token


def oauth_options(broker: TlsBroker, provider: AbstractTokenProvider) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "ssl_context": tls_context(broker),
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": provider}


# ---------------------------------------------------------------------------- listeners serve


async def test_start_prints_every_listener(tls_broker: TlsBroker) -> None:
    port = tls_broker.port
    labels = ["plaintext", None, "sasl", "ssl", "mtls", "sasl-ssl", "oauth", "ssl-wrong-host",
              "ssl-expired"]  # port + 1 is the controller's
    assert tls_broker.addresses == {
        label: f"127.0.0.1:{port + at}" for at, label in enumerate(labels) if label}
    print(f"kafka-local start with TLS and OAuth took {tls_broker.start_s:.1f} s")
    status = kafka_local_tls("status", port, {})
    assert status.returncode == 0
    assert f"ssl: 127.0.0.1:{port + 3}" in status.stdout.splitlines()
    assert f"tls-dir: {tls_broker.tls_dir}" in status.stdout.splitlines()


async def test_ssl_listener_serves_a_client_that_trusts_the_ca(tls_broker: TlsBroker) -> None:
    await round_trip(tls_broker.addresses["ssl"], security_protocol="SSL",
                     ssl_context=tls_context(tls_broker))


async def test_mtls_listener_serves_a_client_certificate_signed_by_the_ca(
    tls_broker: TlsBroker,
) -> None:
    await round_trip(tls_broker.addresses["mtls"], security_protocol="SSL",
                     ssl_context=tls_context(tls_broker, certfile="client.crt",
                                             keyfile="client.key"))


async def test_mtls_listener_serves_the_encrypted_key_with_its_password(
    tls_broker: TlsBroker,
) -> None:
    assert (tls_broker.tls_dir / "client-key.password").read_text() == CLIENT_KEY_PASSWORD
    context = tls_context(tls_broker, certfile="client.crt", keyfile="client-encrypted.key",
                          password=CLIENT_KEY_PASSWORD)
    await round_trip(tls_broker.addresses["mtls"], security_protocol="SSL", ssl_context=context)


async def test_sasl_ssl_listener_serves_scram_sha_512(tls_broker: TlsBroker) -> None:
    await round_trip(tls_broker.addresses["sasl-ssl"], security_protocol="SASL_SSL",
                     ssl_context=tls_context(tls_broker), sasl_mechanism="SCRAM-SHA-512",
                     sasl_plain_username=tls_broker.username,
                     sasl_plain_password=tls_broker.password)


async def test_oauth_listener_serves_tokens_from_the_token_endpoint(
    tls_broker: TlsBroker,
) -> None:
    before = tls_broker.oauth.tokens_issued
    await round_trip(tls_broker.addresses["oauth"],
                     **oauth_options(tls_broker, TokenEndpointProvider(tls_broker.oauth)))
    assert tls_broker.oauth.tokens_issued > before


# ---------------------------------------------------------------------------- bad material fails


async def test_mtls_listener_refuses_a_client_without_a_certificate(
    tls_broker: TlsBroker,
) -> None:
    await refused(tls_broker.addresses["mtls"], security_protocol="SSL",
                  ssl_context=tls_context(tls_broker))


@pytest.mark.parametrize("client", ["untrusted-client", "expired-client"])
async def test_mtls_listener_refuses_a_certificate_it_cannot_trust(
    tls_broker: TlsBroker, client: str,
) -> None:
    context = tls_context(tls_broker, certfile=f"{client}.crt", keyfile=f"{client}.key")
    await refused(tls_broker.addresses["mtls"], security_protocol="SSL", ssl_context=context)


async def test_a_client_trusting_another_ca_rejects_the_broker(tls_broker: TlsBroker) -> None:
    error = await handshake_error(tls_broker.addresses["ssl"],
                                  tls_context(tls_broker, cafile="untrusted-ca.crt"))
    assert error.verify_message in {"unable to get local issuer certificate",
                                    "self-signed certificate in certificate chain"}


async def test_a_client_rejects_a_broker_certificate_for_another_host(
    tls_broker: TlsBroker,
) -> None:
    error = await handshake_error(tls_broker.addresses["ssl-wrong-host"],
                                  tls_context(tls_broker))
    # Dialled by IP address, so OpenSSL says "IP address mismatch" ("Hostname mismatch" for a
    # name).
    assert error.verify_message == (
        "IP address mismatch, certificate is not valid for '127.0.0.1'.")


async def test_a_client_rejects_an_expired_broker_certificate(tls_broker: TlsBroker) -> None:
    error = await handshake_error(tls_broker.addresses["ssl-expired"], tls_context(tls_broker))
    assert error.verify_message == "certificate has expired"


def test_the_mismatched_key_does_not_load_with_the_client_certificate(
    tls_broker: TlsBroker,
) -> None:
    with pytest.raises(ssl.SSLError, match="KEY_VALUES_MISMATCH"):
        tls_context(tls_broker, certfile="client.crt", keyfile="mismatched-client.key")


async def test_sasl_ssl_listener_refuses_a_wrong_scram_password(tls_broker: TlsBroker) -> None:
    await refused(tls_broker.addresses["sasl-ssl"], security_protocol="SASL_SSL",
                  ssl_context=tls_context(tls_broker), sasl_mechanism="SCRAM-SHA-512",
                  sasl_plain_username=tls_broker.username,
                  sasl_plain_password="wrong-Password-1")


async def test_oauth_listener_refuses_a_token_signed_by_another_key(
    tls_broker: TlsBroker,
) -> None:
    forged = tls_broker.oauth.foreign_token()
    logged = await undelivered(tls_broker, **oauth_options(tls_broker, FixedTokenProvider(forged)))
    assert "JWT rejected due to invalid signature" in logged
    # The same claims signed by the server's key pass: the signature was the difference.
    await round_trip(tls_broker.addresses["oauth"],
                     **oauth_options(tls_broker, FixedTokenProvider(tls_broker.oauth.token())))


async def test_oauth_listener_refuses_an_expired_token(tls_broker: TlsBroker) -> None:
    expired = tls_broker.oauth.token(lifetime_s=-5)
    logged = await undelivered(tls_broker,
                               **oauth_options(tls_broker, FixedTokenProvider(expired)))
    assert "on or after the Expiration Time" in logged


async def test_oauth_listener_drops_a_connection_once_its_token_expires(
    tls_broker: TlsBroker,
) -> None:
    """connections.max.reauth.ms: a token good at connect time is not good forever. One
    connection authenticates with a token that lives 3 s and answers a Metadata request; once
    the token expired, the broker closes that same connection at its next request (aiokafka
    does not re-authenticate), instead of serving it for as long as it stays open."""
    host, port = tls_broker.addresses["oauth"].rsplit(":", 1)
    conn = await create_conn(
        host, int(port), request_timeout_ms=10000,
        **oauth_options(tls_broker, FixedTokenProvider(tls_broker.oauth.token(lifetime_s=3))))
    try:
        before = await conn.send(MetadataRequest([]))
        assert [node[0] for node in before.brokers] == [1]  # (node_id, host, port, rack)
        await asyncio.sleep(4.5)
        # The broker closes it without a word (it logs that at DEBUG only).
        with pytest.raises(KafkaError):
            await conn.send(MetadataRequest([]))
    finally:
        conn.close()


# ---------------------------------------------------------------------------- reuse


def _start_again(broker: TlsBroker, **changed: str) -> subprocess.CompletedProcess[str]:
    """``start`` again with the running broker's settings, ``changed`` overriding some."""
    same = {"KAFKA_SASL_USERNAME": broker.username, "KAFKA_SASL_PASSWORD": broker.password,
            "KAFKA_OAUTH_JWKS_URL": broker.oauth.jwks_url,
            "KAFKA_OAUTH_ISSUER": broker.oauth.issuer,
            "KAFKA_OAUTH_AUDIENCE": broker.oauth.audience}
    return kafka_local_tls("start", broker.port, same | changed)


@pytest.mark.parametrize(("changed", "named"), [
    ({"KAFKA_SASL_USERNAME": "someone-else"}, "KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD"),
    ({"KAFKA_SASL_PASSWORD": "another-s3cret-4b1d"}, "KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD"),
    ({"KAFKA_OAUTH_ISSUER": "https://another-issuer.test"}, "KAFKA_OAUTH_ISSUER"),
    ({"KAFKA_OAUTH_ISSUER": ""}, "KAFKA_OAUTH_ISSUER"),
    ({"KAFKA_OAUTH_AUDIENCE": "another-audience"}, "KAFKA_OAUTH_AUDIENCE"),
], ids=["scram-user", "scram-password", "issuer", "no-issuer", "audience"])
def test_start_refuses_a_running_broker_set_up_otherwise(
    tls_broker: TlsBroker, changed: dict[str, str], named: str,
) -> None:
    # A test asking for other credentials or token checks would otherwise pass or fail against
    # a broker that does not enforce what it asked for.
    started = _start_again(tls_broker, **changed)
    assert started.returncode != 0
    [line] = started.stderr.strip().splitlines()
    assert named in line
    assert "already running" not in started.stderr
    assert all(value not in line for value in changed.values() if value)
    # The running broker is left alone.
    assert kafka_local_tls("status", tls_broker.port, {}).returncode == 0


def test_start_reuses_a_running_broker_set_up_alike(tls_broker: TlsBroker) -> None:
    started = _start_again(tls_broker)
    assert started.returncode == 0, started.stderr
    assert "already running" in started.stderr
    assert started.stdout.strip().splitlines()[-1] == tls_broker.addresses["plaintext"]


# ---------------------------------------------------------------------------- token endpoint


def _post_token(url: str, body: str,
                authorization: str | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body.encode(), method="POST")  # noqa: S310
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            return reply.status, dict(json.load(reply))
    except urllib.error.HTTPError as error:
        return error.code, dict(json.load(error))


def test_token_endpoint_grants_refuses_and_counts() -> None:
    with OAuthServer(lifetime_s=20) as oauth:
        form = (f"grant_type=client_credentials&scope=kafka&client_id={oauth.client_id}"
                f"&client_secret={oauth.client_secret}")
        status, granted = _post_token(oauth.token_url, form)  # client_secret_post
        assert status == 200
        assert granted["token_type"] == "Bearer"
        assert granted["expires_in"] == 20
        assert granted["scope"] == "kafka"
        assert granted["access_token"].count(".") == 2

        wrong = base64.b64encode(f"{oauth.client_id}:not-the-secret".encode()).decode()
        status, refusal = _post_token(oauth.token_url, "grant_type=client_credentials",
                                      f"Basic {wrong}")
        assert (status, refusal["error"]) == (401, "invalid_client")

        oauth.refusing = True
        assert _post_token(oauth.token_url, form)[0] == 401
        assert oauth.tokens_issued == 1
        assert oauth.token_requests == 3
        assert oauth.issued[0].expires_at - oauth.issued[0].issued_at == pytest.approx(20, abs=1)
