"""Amazon MSK IAM (the ``[msk]`` extra): the token AWS's signer makes, checked offline.

No AWS endpoint is reachable here, and none is needed: with credentials in the environment
the signer only computes. The token must be what MSK's broker expects: base64url (no
padding) of a SigV4-presigned URL for ``kafka-cluster:Connect`` in the configured region.
"""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    CredentialRetrievalError,
    EndpointConnectionError,
)

from consumer.kafka.auth.msk_iam import MskIamTokenProvider
from consumer.kafka.auth.oauth import (
    REFRESH_AT,
    OAuthTokenRefused,
    OAuthTokenRejected,
    OAuthTokenUnavailable,
)
from consumer.kafka.clients import client_options
from consumer.kafka.errors import Refuse, Retry, map_kafka_error
from consumer.settings import Settings

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLESESSION"


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """Only what the test sets: no profile files, no instance metadata (a network call)."""
    for name in ("AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def with_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)


async def test_the_token_is_a_presigned_connect_url_for_the_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_credentials(monkeypatch)
    token = await MskIamTokenProvider("eu-west-1").token()

    assert re.fullmatch(r"[A-Za-z0-9_-]+", token), "base64url without padding"
    url = urlparse(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
    assert (url.scheme, url.netloc, url.path) == ("https", "kafka.eu-west-1.amazonaws.com", "/")
    query = {key: values[0] for key, values in parse_qs(url.query).items()}
    assert query["Action"] == "kafka-cluster:Connect"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert re.fullmatch(rf"{ACCESS_KEY}/\d{{8}}/eu-west-1/kafka-cluster/aws4_request",
                        query["X-Amz-Credential"])
    assert query["X-Amz-Expires"] == "900"
    assert query["X-Amz-Security-Token"] == SESSION_TOKEN
    assert re.fullmatch(r"[0-9a-f]{64}", query["X-Amz-Signature"])
    assert query["User-Agent"].startswith("aws-msk-iam-sasl-signer-python/")
    assert SECRET_KEY not in token
    assert SECRET_KEY not in url.geturl()


async def test_the_token_is_reused_until_80_percent_of_its_15_minutes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_credentials(monkeypatch)
    now = [0.0]
    provider = MskIamTokenProvider("us-east-1", clock=lambda: now[0])
    signed: list[str] = []
    sign = provider._generate

    def counting(region: str) -> tuple[Any, Any]:
        signed.append(region)
        return sign(region)

    provider._generate = counting
    first = await provider.token()
    now[0] = 0.79 * 900
    assert await provider.token() == first
    assert signed == ["us-east-1"]
    now[0] = (REFRESH_AT + 0.01) * 900
    assert await provider.token() == first, "still valid: served while it is refreshed"
    await provider.fetched()
    assert signed == ["us-east-1", "us-east-1"]


async def test_without_credentials_start_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(OAuthTokenRefused) as refused:
        await MskIamTokenProvider("eu-west-1").token()
    action = map_kafka_error(refused.value)
    assert isinstance(action, Refuse)
    assert action.message.startswith(
        "kafka_oauth_failed: the Amazon MSK IAM signer (eu-west-1): could not sign a token")
    assert "AWS_REGION" in action.message


async def test_the_settings_select_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-southeast-2")
    settings = Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="OAUTHBEARER",
                        kafka_sasl_oauth_provider="aws_msk_iam")
    provider = client_options(settings, "msk")["sasl_oauth_token_provider"]
    assert isinstance(provider, MskIamTokenProvider)
    assert provider.region == "ap-southeast-2"


def test_a_token_the_cluster_refuses_points_at_iam_not_at_a_token_endpoint() -> None:
    # As the OAUTHBEARER authenticator raises it, with the provider's hint.
    refused = OAuthTokenRejected("invalid_token", rejected_hint=MskIamTokenProvider.rejected_hint)
    action = map_kafka_error(refused, "b-1.msk.example:9098")
    assert isinstance(action, Refuse)
    assert action.message.startswith(
        "kafka_oauth_failed: the broker b-1.msk.example:9098 refused the OAuth token "
        "(invalid_token): the cluster does not accept the signed IAM identity")
    assert "AWS_REGION" in action.message
    assert "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL" not in action.message


def failing_after_the_first_token(provider: MskIamTokenProvider, error: Exception) -> None:
    """The provider's real signer signs once, then every call raises ``error``."""
    sign, calls = provider._generate, [0]

    def generate(region: str) -> tuple[Any, Any]:
        calls[0] += 1
        if calls[0] > 1:
            raise error
        return sign(region)

    provider._generate = generate


@pytest.mark.parametrize("error", [
    EndpointConnectionError(endpoint_url="https://sts.eu-west-1.amazonaws.com"),
    ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}},
                "AssumeRoleWithWebIdentity"),
    CredentialRetrievalError(provider="container-role", error_msg="timeout"),
    ConnectionResetError(104, "Connection reset by peer"),
], ids=["sts-unreachable", "sts-throttling", "role-credentials-late", "reset"])
async def test_an_sts_outage_after_expiry_is_retried_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch, error: Exception,
) -> None:
    with_credentials(monkeypatch)
    now = [0.0]
    provider = MskIamTokenProvider("eu-west-1", clock=lambda: now[0])
    failing_after_the_first_token(provider, error)
    told: list[OAuthTokenRefused] = []
    provider.on_refused_while_running(told.append)
    await provider.token()
    now[0] = 899.0  # expired (15 minutes less the 2 s margin)
    with pytest.raises(OAuthTokenUnavailable) as unavailable:
        await provider.token()
    assert isinstance(map_kafka_error(unavailable.value), Retry)
    assert f"could not sign a token ({type(error).__name__})" in str(unavailable.value)
    assert told == [], "an outage does not stop the worker"


async def test_credentials_gone_after_expiry_stop_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_credentials(monkeypatch)
    now = [0.0]
    provider = MskIamTokenProvider("eu-west-1", clock=lambda: now[0])
    told: list[OAuthTokenRefused] = []
    provider.on_refused_while_running(told.append)
    await provider.token()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    now[0] = 899.0
    with pytest.raises(OAuthTokenRefused) as refused:
        await provider.token()
    assert told == [refused.value]
    assert "no AWS credentials found" in str(refused.value)
