"""Amazon MSK IAM authentication: AWS's published signer behind the OAUTHBEARER slot.

``KAFKA_SASL_MECHANISM=OAUTHBEARER`` with ``KAFKA_SASL_OAUTH_PROVIDER=aws_msk_iam``: the
token is a base64url SigV4-presigned ``kafka-cluster:Connect`` URL for ``AWS_REGION``, signed
with the credentials of the standard AWS chain (environment, web identity for IRSA, profile,
instance role) by ``aws-msk-iam-sasl-signer-python``, installed by the ``[msk]`` extra. The
signer makes no network call with static credentials; it is synchronous (botocore), so it
runs in a thread. Refresh and failure policy: ``CachedTokenProvider``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from consumer.errors import ConfigError
from consumer.kafka.auth.oauth import CachedTokenProvider, TokenFetchError

EXTRA = "groundedness-worker[msk]"


class MskIamTokenProvider(CachedTokenProvider):
    """Tokens from AWS's MSK IAM signer for one region."""

    hint = " (check the AWS credentials in the environment and AWS_REGION)"
    rejected_hint = ("the cluster does not accept the signed IAM identity (check AWS_REGION "
                     "is the cluster's, and that the IAM policy allows kafka-cluster:Connect)")

    def __init__(self, region: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock=clock)
        self.region = region
        self.issuer = f"the Amazon MSK IAM signer ({region})"
        self._generate = signer()

    async def fetch(self) -> tuple[str, float]:
        try:
            token, expiry_ms = await asyncio.to_thread(self._generate, self.region)
        except Exception as exc:
            if no_credentials(exc):
                raise TokenFetchError(
                    f"could not sign a token ({type(exc).__name__}): no AWS credentials found",
                    refused=True) from None
            # STS or the instance metadata unreachable or throttling, a role's credentials
            # not refreshed in time: a pod restarted for it would meet the same outage.
            raise TokenFetchError(f"could not sign a token ({type(exc).__name__})",
                                  refused=False) from None
        return str(token), float(expiry_ms) / 1000 - time.time()


def no_credentials(exc: Exception) -> bool:
    """The credential chain found nothing at all: the one signer failure a retry won't fix.
    botocore says ``NoCredentialsError``; the signer, given none, reads an attribute of None
    (``AttributeError``) or finds them empty (``ValueError``). Anything else (unreachable,
    throttled, ``CredentialRetrievalError``, ``ClientError``) is retried."""
    # botocore comes with the signer, which fetch() has imported.
    from botocore.exceptions import NoCredentialsError  # type: ignore[import-untyped]

    if isinstance(exc, NoCredentialsError | AttributeError):
        return True
    return isinstance(exc, ValueError) and "credentials" in str(exc).lower()


def signer() -> Callable[[str], tuple[Any, Any]]:
    """The signer's ``generate_auth_token``, or a ConfigError naming the extra to install."""
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError(
            f"KAFKA_SASL_OAUTH_PROVIDER is aws_msk_iam, but AWS's signer is not installed "
            f"(pip install '{EXTRA}')"
        ) from None
    generate: Callable[[str], tuple[Any, Any]] = MSKAuthTokenProvider.generate_auth_token
    return generate
