"""TLS for the Kafka clients, without a broker: what a user meets when a certificate is wrong.

Certificates are made for each run (the ``cryptography`` package): a CA, a broker certificate
for 127.0.0.1, an expired one, one from a foreign CA, client certificates. The broker is a
real TLS server on loopback (``TlsServer``: Python's ssl on a blocking socket, so its alerts
reach the client as a Java broker's do) and a real ``AIOKafkaConsumer`` starts against it
through ``start_once``: every handshake failure happens before any Kafka byte, so each must
come out as one ``kafka_tls_failed`` line naming its cause. The files themselves are checked
when the TLS context is built: a missing file, a key that does not match its certificate, a
wrong key password each give one line naming the setting.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from consumer.cli import main
from consumer.errors import ConfigError
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.auth.oauth import ClientCredentialsTokenProvider
from consumer.kafka.clients import client_options, start_once, tls_context
from consumer.kafka.errors import Retry
from consumer.settings import Settings, load_settings
from scripts.kafka import certs
from tests.support.logs import collected_records
from tests.support.ports import free_port
from tests.support.tls_server import KEY_PASSWORD, Pki, TlsServer, pki, write_cert, write_key

__all__ = ["pki"]  # the fixture


@pytest.fixture
def serve(pki: Pki) -> Iterator[Any]:
    servers: list[TlsServer] = []

    def start(name: str = "broker", *, expired: bool = False, foreign_ca: bool = False,
              mutual: bool = False) -> TlsServer:
        ca = certs.make_ca("Rogue CA") if foreign_ca else None
        certfile, keyfile = pki.leaf(name, expired=expired, ca=ca)
        servers.append(TlsServer(certfile, keyfile, pki.cafile if mutual else None))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


async def start_against(server: TlsServer, pki: Pki, host: str = "127.0.0.1",
                        **settings: Any) -> Retry | None:
    """``start_once`` on a real consumer with the worker's options, pointed at ``server``."""
    options = client_options(Settings(
        kafka_security_protocol="SSL", kafka_ssl_cafile=pki.cafile, **settings), "tls-test")
    consumer = AIOKafkaConsumer(**{**options, "bootstrap_servers": f"{host}:{server.port}"})
    try:
        return await start_once(consumer)
    finally:
        await consumer.stop()


# -- failures at connect: one line, naming the cause --------------------------------------------


async def test_a_broker_certificate_from_an_unknown_ca_is_refused(serve: Any, pki: Pki) -> None:
    with pytest.raises(ConfigError) as refused:
        await start_against(serve(foreign_ca=True), pki)
    message = str(refused.value)
    assert message.startswith("kafka_tls_failed: the broker 127.0.0.1:")
    assert "unknown CA" in message
    assert "KAFKA_SSL_CAFILE" in message
    assert "\n" not in message


async def test_a_broker_certificate_for_another_name_is_refused(serve: Any, pki: Pki) -> None:
    # The certificate names 127.0.0.1 and broker.test, not localhost.
    with pytest.raises(ConfigError) as refused:
        await start_against(serve(), pki, host="localhost")
    assert "hostname mismatch" in str(refused.value)
    assert "KAFKA_BOOTSTRAP_SERVERS" in str(refused.value)


async def test_without_hostname_verification_the_same_certificate_passes(
    serve: Any, pki: Pki,
) -> None:
    server = serve()
    # No Kafka behind the handshake: "unreachable" is what comes after a handshake that passed.
    outcome = await start_against(server, pki, host="localhost", kafka_ssl_check_hostname=False)
    assert isinstance(outcome, Retry)
    assert server.handshakes >= 1


async def test_an_expired_broker_certificate_is_refused(serve: Any, pki: Pki) -> None:
    with pytest.raises(ConfigError) as refused:
        await start_against(serve(expired=True), pki)
    assert "certificate has expired" in str(refused.value)


async def test_a_broker_requiring_a_client_certificate_says_so(serve: Any, pki: Pki) -> None:
    with pytest.raises(ConfigError) as refused:
        await start_against(serve(mutual=True), pki)
    assert "requires a client certificate" in str(refused.value)
    assert "KAFKA_SSL_CERTFILE" in str(refused.value)


async def test_a_client_certificate_the_broker_does_not_trust_is_refused(
    serve: Any, pki: Pki,
) -> None:
    with pytest.raises(ConfigError) as refused:
        await start_against(serve(mutual=True), pki, kafka_ssl_certfile=pki.foreign_client_cert,
                            kafka_ssl_keyfile=pki.foreign_client_key)
    message = str(refused.value)
    assert "refused the client certificate" in message
    assert "KAFKA_SSL_KEYFILE" in message


def mount(mounted: dict[str, str], certfile: str, keyfile: str) -> None:
    """Put these files at the mounted paths as Kubernetes' atomic writer does: new files
    under the same names."""
    for setting, source in (("kafka_ssl_certfile", certfile), ("kafka_ssl_keyfile", keyfile)):
        staged = f"{mounted[setting]}.new"
        shutil.copyfile(source, staged)
        os.replace(staged, mounted[setting])


async def test_certificates_rotated_in_place_are_read_by_the_next_client(
    serve: Any, pki: Pki, tmp_path: Path,
) -> None:
    """Strimzi and cert-manager renew a client certificate by swapping the mounted files: the
    next client made (a restarted consumer, a new transactional producer) must present it."""
    server = serve(mutual=True)
    mounted = {"kafka_ssl_certfile": str(tmp_path / "user.crt"),
               "kafka_ssl_keyfile": str(tmp_path / "user.key")}
    # Not yet renewed: a certificate the broker does not trust.
    mount(mounted, pki.foreign_client_cert, pki.foreign_client_key)
    with pytest.raises(ConfigError, match="refused the client certificate"):
        await start_against(server, pki, **mounted)

    renewed = certs.issue(pki.ca, "worker")
    mount(mounted, write_cert(tmp_path / "new.crt", renewed),
          write_key(tmp_path / "new.key", renewed))
    outcome = await start_against(server, pki, **mounted)
    assert isinstance(outcome, Retry), "the renewed certificate passed the handshake"


async def test_mutual_tls_with_the_right_certificate_and_key_password_passes(
    serve: Any, pki: Pki,
) -> None:
    server = serve(mutual=True)
    outcome = await start_against(server, pki, kafka_ssl_certfile=pki.client_cert,
                                  kafka_ssl_keyfile=pki.client_key,
                                  kafka_ssl_key_password=KEY_PASSWORD)
    assert isinstance(outcome, Retry), "the handshake passed; no Kafka behind it"
    assert server.handshakes >= 1


# -- failures at load: one line naming the setting -----------------------------------------------


def test_a_missing_ca_file_names_its_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^KAFKA_SSL_CAFILE: .*missing\.crt does not exist"):
        tls_context(str(tmp_path / "missing.crt"), None, None, None, True)


def test_a_ca_file_that_is_not_pem_names_its_setting(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.crt"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"^KAFKA_SSL_CAFILE: .* holds no usable PEM"):
        tls_context(str(garbage), None, None, None, True)


def test_a_missing_client_key_names_its_setting(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^KAFKA_SSL_KEYFILE: "):
        tls_context(pki.cafile, pki.client_cert, str(tmp_path / "gone.key"), None, True)


def test_a_key_that_does_not_match_its_certificate_is_refused(pki: Pki) -> None:
    with pytest.raises(ConfigError, match=r"^KAFKA_SSL_KEYFILE does not match the certificate"):
        tls_context(pki.cafile, pki.client_cert, pki.foreign_client_key, None, True)


def test_a_key_of_another_type_than_its_certificate_does_not_match(
    pki: Pki, tmp_path: Path,
) -> None:
    """An EC key for an RSA certificate: OpenSSL says NO_CERTIFICATE_ASSIGNED, not a mismatch."""
    ec_key = ec.generate_private_key(ec.SECP256R1())
    keyfile = tmp_path / "ec.key"
    keyfile.write_bytes(ec_key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    with pytest.raises(ConfigError) as refused:
        tls_context(pki.cafile, pki.client_cert, str(keyfile), None, True)
    assert str(refused.value) == (
        f"KAFKA_SSL_KEYFILE does not match the certificate in {pki.client_cert}")


def test_a_certificate_file_without_its_key_asks_for_the_keyfile(pki: Pki) -> None:
    with pytest.raises(ConfigError) as refused:
        tls_context(pki.cafile, pki.client_cert, None, None, True)
    assert str(refused.value) == "KAFKA_SSL_CERTFILE holds no private key: set KAFKA_SSL_KEYFILE"


def test_a_wrong_key_password_is_refused_without_echoing_it(pki: Pki) -> None:
    with pytest.raises(ConfigError) as refused:
        tls_context(pki.cafile, pki.client_cert, pki.client_key, "not-the-password", True)
    assert str(refused.value) == "KAFKA_SSL_KEY_PASSWORD does not decrypt KAFKA_SSL_KEYFILE"


def test_an_encrypted_key_without_a_password_asks_for_the_setting_not_the_terminal(
    pki: Pki,
) -> None:
    with pytest.raises(ConfigError, match=r"^KAFKA_SSL_KEYFILE is encrypted: set KAFKA_SSL_KEY"):
        tls_context(pki.cafile, pki.client_cert, pki.client_key, None, True)


def test_hostname_verification_is_on_by_default_and_its_absence_is_a_warning(pki: Pki) -> None:
    assert Settings().kafka_ssl_check_hostname is True
    assert tls_context(pki.cafile, None, None, None, True).check_hostname is True
    with structlog.testing.capture_logs() as logs:
        unchecked = tls_context(pki.cafile, None, None, "unused", False)
    assert unchecked.check_hostname is False
    assert unchecked.verify_mode == ssl.CERT_REQUIRED, "the chain is still verified"
    assert [log["event"] for log in logs] == ["kafka_ssl_hostname_unchecked"]


async def test_every_client_shares_one_tls_context_and_one_token_provider(pki: Pki) -> None:
    settings = Settings(
        kafka_security_protocol="SASL_SSL", kafka_ssl_cafile=pki.cafile,
        kafka_sasl_mechanism="OAUTHBEARER",
        kafka_sasl_oauth_token_endpoint_url="http://127.0.0.1:9/token",
        kafka_sasl_oauth_client_id="worker", kafka_sasl_oauth_client_secret="s3cret")
    first, second = client_options(settings, "a"), client_options(settings, "b")
    assert first["ssl_context"] is second["ssl_context"]
    provider = first["sasl_oauth_token_provider"]
    assert isinstance(provider, ClientCredentialsTokenProvider)
    assert provider is second["sasl_oauth_token_provider"]
    assert "sasl_plain_password" not in first
    # aiokafka_compat reaches it on both kinds of client (start_once fetches the first token).
    consumer, producer = AIOKafkaConsumer(**first), AIOKafkaProducer(**second)
    try:
        assert aiokafka_compat.oauth_token_provider(consumer) is provider
        assert aiokafka_compat.oauth_token_provider(producer) is provider
    finally:
        await consumer.stop()
        await producer.stop()


# -- inconsistent settings: one line at start --------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        pytest.param({"kafka_ssl_keyfile": "user.key"},
                     "KAFKA_SSL_KEYFILE is set without KAFKA_SSL_CERTFILE: set both", id="key"),
        pytest.param({"kafka_ssl_key_password": "pw"},
                     "KAFKA_SSL_KEY_PASSWORD is set without KAFKA_SSL_KEYFILE or "
                     "KAFKA_SSL_CERTFILE", id="key-password"),
        pytest.param({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "oauthbearer",
                      "kafka_sasl_oauth_client_id": "worker"},
                     "KAFKA_SASL_MECHANISM is OAUTHBEARER, so KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL,"
                     " KAFKA_SASL_OAUTH_CLIENT_ID and KAFKA_SASL_OAUTH_CLIENT_SECRET are all "
                     "required", id="oauth-endpoint"),
        pytest.param({"kafka_security_protocol": "SASL_SSL",
                      "kafka_sasl_mechanism": "SCRAM-SHA-512", "kafka_sasl_username": "u"},
                     "KAFKA_SASL_MECHANISM is SCRAM-SHA-512, so KAFKA_SASL_USERNAME and "
                     "KAFKA_SASL_PASSWORD are both required", id="scram-password"),
        pytest.param({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "OAUTHBEARER",
                      "kafka_sasl_oauth_provider": "aws_msk_iam"},
                     "KAFKA_SASL_OAUTH_PROVIDER is aws_msk_iam, so AWS_REGION is required",
                     id="msk-region"),
        # Settings the protocol would ignore: the worker would retry a listener it cannot
        # speak to ("Connection closed") forever.
        pytest.param({"kafka_ssl_certfile": "user.crt", "kafka_ssl_keyfile": "user.key"},
                     "KAFKA_SSL_CERTFILE is set but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: use "
                     "SSL or SASL_SSL", id="client-certificate-on-plaintext"),
        pytest.param({"kafka_ssl_cafile": "ca.crt"},
                     "KAFKA_SSL_CAFILE is set but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: use SSL "
                     "or SASL_SSL", id="ca-on-plaintext"),
        pytest.param({"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_ssl_cafile": "ca.crt",
                      "kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "u",
                      "kafka_sasl_password": "p"},
                     "KAFKA_SSL_CAFILE is set but KAFKA_SECURITY_PROTOCOL is SASL_PLAINTEXT: use "
                     "SASL_SSL", id="ca-on-sasl-plaintext"),
        pytest.param({"kafka_sasl_mechanism": "oauthbearer",
                      "kafka_sasl_oauth_token_endpoint_url": "https://idp/token"},
                     "KAFKA_SASL_MECHANISM is set but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: use "
                     "SASL_PLAINTEXT or SASL_SSL", id="mechanism-on-plaintext"),
        pytest.param({"kafka_security_protocol": "SSL", "kafka_sasl_username": "u"},
                     "KAFKA_SASL_USERNAME is set but KAFKA_SECURITY_PROTOCOL is SSL: use SASL_SSL",
                     id="username-on-ssl"),
        pytest.param({"kafka_security_protocol": "ssl", "kafka_sasl_oauth_client_id": "worker"},
                     "KAFKA_SASL_OAUTH_CLIENT_ID is set but KAFKA_SECURITY_PROTOCOL is SSL: use "
                     "SASL_SSL", id="oauth-client-on-ssl"),
        pytest.param({"kafka_sasl_oauth_provider": "aws_msk_iam"},
                     "KAFKA_SASL_OAUTH_PROVIDER is set but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: "
                     "use SASL_PLAINTEXT or SASL_SSL", id="msk-on-plaintext"),
    ],
)
def test_an_inconsistent_combination_is_one_line(
    settings: dict[str, str], line: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as refused:
        load_settings(require_threshold=False, kafka=True, **settings)
    assert str(refused.value) == line


def test_oauthbearer_needs_no_username_and_msk_needs_no_client_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    settings = load_settings(require_threshold=False, kafka_security_protocol="SASL_SSL",
                             kafka_sasl_mechanism="OAUTHBEARER",
                             kafka_sasl_oauth_provider="aws_msk_iam")
    assert settings.aws_region == "eu-west-1"


def test_what_a_chart_or_a_shared_secret_leaves_on_plaintext_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blank TLS/SASL values (a chart renders them so), and passwords alone (a Secret mounted
    whole), are no sign of a protocol left at PLAINTEXT by mistake."""
    for name in ("KAFKA_SSL_CAFILE", "KAFKA_SSL_CERTFILE", "KAFKA_SSL_KEYFILE",
                 "KAFKA_SASL_MECHANISM", "KAFKA_SASL_OAUTH_PROVIDER",
                 "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL", "KAFKA_SASL_OAUTH_CLIENT_ID",
                 "KAFKA_SASL_OAUTH_SCOPE", "KAFKA_SASL_USERNAME"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "pw-from-a-shared-secret")
    monkeypatch.setenv("KAFKA_SASL_OAUTH_CLIENT_SECRET", "cs-from-a-shared-secret")
    settings = load_settings(require_threshold=False, kafka=True)
    assert settings.kafka_security_protocol == "PLAINTEXT"
    assert "ssl_context" not in client_options(settings, "plain")


@pytest.mark.parametrize(("variable", "value"), [
    ("KAFKA_SASL_USERNAME", "left-from-another-shell"), ("KAFKA_SSL_CAFILE", "old-ca.crt"),
])
def test_a_leftover_kafka_variable_stops_only_the_commands_that_connect(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``check`` reads a file and never connects: a leftover variable is no reason to refuse
    it. ``run``, ``replay`` and ``load-sample`` would retry a listener forever: one line."""
    monkeypatch.setenv("RULES", "missing_citation")  # no judge, no key, no threshold
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")  # never reached
    monkeypatch.delenv("KAFKA_SECURITY_PROTOCOL", raising=False)
    monkeypatch.setenv(variable, value)
    traces = tmp_path / "traces.jsonl"
    traces.write_text('{"trace_id": "t1", "output": "Refunds are prorated [1].", '
                      '"retrieved_documents": [{"id": "kb-1", "content": "Prorated."}]}\n')

    assert main(["check", str(traces)]) == 0
    assert capsys.readouterr().err == "check: missing_citation: 1 pass, 0 fail, 0 error\n"

    for command in (["run"], ["replay", "--from", "2026-01-01T00:00:00Z"],
                    ["load-sample", "--limit", "1"]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err == f"{variable} is set but KAFKA_SECURITY_PROTOCOL is PLAINTEXT: use " + (
            "SSL or SASL_SSL" if variable == "KAFKA_SSL_CAFILE"
            else "SASL_PLAINTEXT or SASL_SSL") + "\n", command


def test_the_new_secrets_are_redacted_everywhere() -> None:
    settings = Settings(kafka_security_protocol="SSL", kafka_ssl_key_password="kp-1",
                        kafka_ssl_certfile="c", kafka_sasl_oauth_client_secret="cs-2")
    assert {"kp-1", "cs-2"} <= set(settings.secrets())
    assert "kp-1" not in repr(settings)
    assert "cs-2" not in repr(settings)


async def test_a_refused_handshake_leaves_no_aiokafka_log_line(serve: Any, pki: Pki) -> None:
    """The refusal is said once, by the ConfigError: aiokafka's record of it is held back."""
    with collected_records(aiokafka_compat.CLIENT_LOGGER) as records, pytest.raises(ConfigError):
        await start_against(serve(expired=True), pki)
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []


def test_blank_values_as_a_chart_renders_them_are_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_SSL_CERTFILE", "KAFKA_SSL_KEYFILE", "KAFKA_SSL_KEY_PASSWORD",
                 "KAFKA_SSL_CHECK_HOSTNAME", "KAFKA_SASL_OAUTH_PROVIDER",
                 "KAFKA_SASL_OAUTH_CLIENT_SECRET", "KAFKA_SASL_OAUTH_SCOPE"):
        monkeypatch.setenv(name, "")
    settings = load_settings(require_threshold=False)
    assert settings.kafka_ssl_key_password is None
    assert settings.kafka_ssl_certfile is None
    assert settings.kafka_ssl_check_hostname is True
    assert settings.kafka_sasl_oauth_provider == "client_credentials"
