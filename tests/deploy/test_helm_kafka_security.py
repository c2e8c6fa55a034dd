"""The chart's Kafka security: mutual TLS from a Strimzi ``KafkaUser`` Secret, OAUTHBEARER
(an OAuth client, or Amazon MSK IAM), hostname verification turned off.

What a team on Strimzi or an OAuth-secured cluster meets: the chart renders, the pod would get
the files and variables the worker reads, and the worker accepts them. Checked without a
cluster: ``helm template`` renders the objects; a small stand-in for the kubelet (below) gives
the worker container its environment from the ConfigMap and the Secrets, and writes each
mounted Secret key to a temporary directory standing for the mount path; the worker's own
settings then parse that environment and build its Kafka client options (the TLS context loads
the real certificate and key, the token provider is made). KEDA's scaler is checked to
authenticate with the very same Secrets and keys. Values that do not fit together fail the
render with their message, from the schema and (``--skip-schema-validation``) the templates.

Needs the helm CLI (``scripts/install-helm``); skipped without it.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from consumer.kafka.auth.msk_iam import MskIamTokenProvider
from consumer.kafka.clients import client_options
from consumer.settings import Settings, load_settings
from scripts.kafka import certs
from tests.support.helm import CHART, FULLNAME, Helm, Values, iter_strings

Manifest = dict[str, Any]
# Secrets that exist in the namespace before the release: name -> key -> bytes.
ClusterSecrets = dict[str, dict[str, bytes]]

CLUSTER_CA_SECRET = "my-cluster-cluster-ca-cert"  # Strimzi: <cluster>-cluster-ca-cert
KAFKA_USER = "groundedness"  # Strimzi: the KafkaUser's Secret is named after the user
OAUTH_CLIENT_SECRET = "oauth-client-s3cret-7f2a"
KEY_PASSWORD = "key-pa55-91c4"
TOKEN_ENDPOINT = "https://sso.example.test/realms/kafka/protocol/openid-connect/token"

# The Kafka scaler's authentication parameters (KEDA's Apache Kafka scaler documentation).
KEDA_KAFKA_AUTH_PARAMETERS = frozenset({
    "sasl", "saslTokenProvider", "username", "password", "oauthTokenEndpointUri", "scopes",
    "oauthExtensions", "tls", "ca", "cert", "key", "keyPassword",
})
MSK_REGION = "eu-west-1"
MSK_BOOTSTRAP = "b-1.gw.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"  # MSK's IAM listener


# --- a CA, and a client certificate and key it signed, in PEM as Strimzi's Secrets hold them ---


@dataclass(frozen=True)
class Pki:
    ca_crt: bytes
    user_crt: bytes
    user_key: bytes
    encrypted_key: bytes  # the same key under KEY_PASSWORD


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca = certs.make_ca("cluster-ca")
    user = certs.issue(ca, KAFKA_USER)
    return Pki(ca_crt=certs.cert_pem(ca), user_crt=certs.cert_pem(user),
               user_key=certs.key_pem(user),
               encrypted_key=certs.key_pem(user, KEY_PASSWORD))


@pytest.fixture(scope="module")
def strimzi(pki: Pki) -> ClusterSecrets:
    """The Secrets Strimzi's operators make: the cluster CA's and a tls KafkaUser's."""
    return {
        CLUSTER_CA_SECRET: {"ca.crt": pki.ca_crt, "ca.p12": b"\x30\x82", "ca.password": b"p12"},
        KAFKA_USER: {
            "ca.crt": pki.ca_crt,
            "user.crt": pki.user_crt,
            "user.key": pki.user_key,
            "user.p12": b"\x30\x82\x0a",
            "user.password": b"p12-password-not-for-the-worker",
        },
    }


# --- rendering, and a stand-in for the kubelet ---



@pytest.fixture(scope="module")
def render(helm: Helm) -> Callable[[Values], list[Manifest]]:
    def _render(values: Values) -> list[Manifest]:
        result = helm.template(values)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return _render


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests
             if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def worker(manifests: list[Manifest]) -> Manifest:
    [container] = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def volumes(manifests: list[Manifest]) -> dict[str, Manifest]:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    return {volume["name"]: volume for volume in pod["volumes"]}


def secret_data(manifests: list[Manifest], cluster: ClusterSecrets) -> ClusterSecrets:
    """Every Secret the pod can read: the cluster's and the release's own."""
    secrets = {name: dict(data) for name, data in cluster.items()}
    for manifest in manifests:
        if manifest["kind"] == "Secret":
            data = {k: base64.b64decode(v) for k, v in (manifest.get("data") or {}).items()}
            data |= {k: v.encode() for k, v in (manifest.get("stringData") or {}).items()}
            secrets[manifest["metadata"]["name"]] = data
    return secrets


def secret_value(secrets: ClusterSecrets, name: str, key: str) -> bytes:
    # The kubelet does not start a container whose Secret or key is missing.
    assert name in secrets, f"the pod reads Secret {name}, which does not exist"
    assert key in secrets[name], f"the pod reads key {key} of Secret {name}, which it lacks"
    return secrets[name][key]


def pod_environment(manifests: list[Manifest], cluster: ClusterSecrets,
                    root: Path) -> dict[str, str]:
    """The worker container's environment as the kubelet would give it, with each mounted
    Secret written under ``root`` and the variables naming a mounted file pointed there."""
    secrets = secret_data(manifests, cluster)
    container = worker(manifests)
    environment: dict[str, str] = dict(one(manifests, "ConfigMap")["data"])
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = variable["value"]
        else:
            ref = variable["valueFrom"]["secretKeyRef"]
            environment[variable["name"]] = secret_value(secrets, ref["name"],
                                                         ref["key"]).decode()
    by_name = volumes(manifests)
    mounts: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        source = by_name[mount["name"]].get("secret")
        if source is None:
            continue  # /tmp, or a ConfigMap (not used by these cases)
        assert mount.get("readOnly") is True, f"{mount['name']} is mounted writable"
        directory = root / mount["mountPath"].lstrip("/")
        directory.mkdir(parents=True)
        for item in source["items"]:
            content = secret_value(secrets, source["secretName"], item["key"])
            (directory / item["path"]).write_bytes(content)
        mounts[mount["mountPath"]] = directory
    for name, value in environment.items():
        for mount_path, directory in mounts.items():
            if value.startswith(f"{mount_path}/"):
                environment[name] = str(directory / value.removeprefix(f"{mount_path}/"))
    return environment


def worker_settings(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]) -> Settings:
    """The worker's settings from exactly ``environment`` (nothing of the test's own)."""
    for field in Settings.model_fields:
        monkeypatch.delenv(field.upper(), raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def scaler_auth(manifests: list[Manifest]) -> dict[str, Manifest]:
    spec = one(manifests, "TriggerAuthentication")["spec"]
    refs = [*spec.get("secretTargetRef", []), *spec.get("configMapTargetRef", [])]
    return {ref["parameter"]: ref for ref in refs}


def scaler_parameters(manifests: list[Manifest], cluster: ClusterSecrets) -> dict[str, str]:
    """What KEDA's Kafka scaler reads through the TriggerAuthentication."""
    secrets = secret_data(manifests, cluster)
    return {parameter: secret_value(secrets, ref["name"], ref["key"]).decode()
            for parameter, ref in scaler_auth(manifests).items()}


# --- the values a team writes ---

# No judge (rules without a model): these tests are about Kafka, not the API key.
NO_JUDGE: Values = {"rules": ["missing_citation"]}
KEDA: Values = {"enabled": True, "partitionCount": 6, "maxReplicas": 6}

STRIMZI_MTLS: Values = {
    **NO_JUDGE,
    "kafka": {
        "bootstrapServers": "my-cluster-kafka-bootstrap.kafka:9093",
        "securityProtocol": "SSL",
        "tls": {"caSecret": CLUSTER_CA_SECRET, "clientSecret": KAFKA_USER},
    },
    "keda": KEDA,
}

OAUTH: Values = {
    **NO_JUDGE,
    "secrets": {"kafkaSaslOauthClientSecret": OAUTH_CLIENT_SECRET},
    "kafka": {
        "securityProtocol": "SASL_SSL",
        "sasl": {
            "mechanism": "OAUTHBEARER",
            "oauth": {"tokenEndpointUrl": TOKEN_ENDPOINT, "clientId": "groundedness-worker",
                      "scope": "kafka profile"},
        },
        "tls": {"caSecret": CLUSTER_CA_SECRET},
    },
    "keda": KEDA,
}


MSK_IAM: Values = {
    **NO_JUDGE,
    "kafka": {
        "bootstrapServers": MSK_BOOTSTRAP,
        "securityProtocol": "SASL_SSL",
        "sasl": {"mechanism": "OAUTHBEARER",
                 "oauth": {"provider": "aws_msk_iam", "awsRegion": MSK_REGION}},
    },
    "keda": KEDA,
}


# --- mutual TLS from a Strimzi KafkaUser Secret ---


def test_a_strimzi_user_secret_is_mounted_as_the_worker_reads_it(
    render: Callable[[Values], list[Manifest]], strimzi: ClusterSecrets, pki: Pki,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifests = render(STRIMZI_MTLS)
    settings = worker_settings(monkeypatch, pod_environment(manifests, strimzi, tmp_path))

    assert settings.kafka_security_protocol == "SSL"
    assert settings.kafka_ssl_key_password is None
    assert settings.kafka_ssl_cafile is not None
    assert settings.kafka_ssl_certfile is not None
    assert settings.kafka_ssl_keyfile is not None
    assert Path(settings.kafka_ssl_cafile).read_bytes() == pki.ca_crt
    assert Path(settings.kafka_ssl_certfile).read_bytes() == pki.user_crt
    assert Path(settings.kafka_ssl_keyfile).read_bytes() == pki.user_key
    # The worker builds its TLS context from them: the key matches the certificate.
    options = client_options(settings, "helm-test")
    assert options["security_protocol"] == "SSL"
    assert options["ssl_context"].check_hostname is True

    # Only the certificate and key reach the pod, not the PKCS#12 store or its password.
    client_volume = volumes(manifests)["kafka-client"]["secret"]
    assert client_volume["secretName"] == KAFKA_USER
    assert sorted(item["key"] for item in client_volume["items"]) == ["user.crt", "user.key"]
    assert "KAFKA_SSL_KEY_PASSWORD" not in {e["name"] for e in worker(manifests).get("env", [])}


def test_an_encrypted_key_under_other_key_names(
    render: Callable[[Values], list[Manifest]], pki: Pki, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A kubernetes.io/tls Secret (cert-manager's names) with a key password beside the key.
    cluster: ClusterSecrets = {
        "kafka-ca": {"ca.pem": pki.ca_crt},
        "worker-tls": {"tls.crt": pki.user_crt, "tls.key": pki.encrypted_key,
                       "key-password": KEY_PASSWORD.encode()},
    }
    values: Values = {
        **NO_JUDGE,
        "kafka": {"securityProtocol": "SSL", "tls": {
            "caSecret": "kafka-ca", "caKey": "ca.pem", "clientSecret": "worker-tls",
            "certKey": "tls.crt", "keyKey": "tls.key", "keyPasswordKey": "key-password"}},
        "keda": KEDA,
    }
    manifests = render(values)
    settings = worker_settings(monkeypatch, pod_environment(manifests, cluster, tmp_path))

    assert settings.kafka_ssl_key_password is not None
    assert settings.kafka_ssl_key_password.get_secret_value() == KEY_PASSWORD
    assert settings.kafka_ssl_keyfile is not None
    assert Path(settings.kafka_ssl_keyfile).read_bytes() == pki.encrypted_key
    client_options(settings, "helm-test")  # the password decrypts the key
    # The password comes from a secretKeyRef, never as a literal value.
    [password] = [e for e in worker(manifests)["env"] if e["name"] == "KAFKA_SSL_KEY_PASSWORD"]
    assert password["valueFrom"] == {
        "secretKeyRef": {"name": "worker-tls", "key": "key-password"}}
    assert scaler_parameters(manifests, cluster) == {
        "tls": "enable", "ca": pki.ca_crt.decode(), "cert": pki.user_crt.decode(),
        "key": pki.encrypted_key.decode(), "keyPassword": KEY_PASSWORD,
    }


def test_keda_reads_the_strimzi_secrets_the_worker_reads(
    render: Callable[[Values], list[Manifest]], strimzi: ClusterSecrets, pki: Pki,
) -> None:
    manifests = render(STRIMZI_MTLS)
    auth = scaler_auth(manifests)
    assert set(auth) <= KEDA_KAFKA_AUTH_PARAMETERS
    assert (auth["cert"]["name"], auth["cert"]["key"]) == (KAFKA_USER, "user.crt")
    assert (auth["key"]["name"], auth["key"]["key"]) == (KAFKA_USER, "user.key")
    assert (auth["ca"]["name"], auth["ca"]["key"]) == (CLUSTER_CA_SECRET, "ca.crt")
    assert scaler_parameters(manifests, strimzi) == {
        "tls": "enable", "ca": pki.ca_crt.decode(), "cert": pki.user_crt.decode(),
        "key": pki.user_key.decode(),
    }
    trigger = one(manifests, "ScaledObject")["spec"]["triggers"][0]
    assert trigger["metadata"]["bootstrapServers"] == "my-cluster-kafka-bootstrap.kafka:9093"


# --- OAUTHBEARER ---


@pytest.mark.parametrize("existing", [False, True], ids=["chart-secret", "existing-secret"])
def test_oauth_values_reach_the_worker(
    render: Callable[[Values], list[Manifest]], strimzi: ClusterSecrets, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, existing: bool,
) -> None:
    values = dict(OAUTH)
    cluster = dict(strimzi)
    if existing:
        values = {key: value for key, value in OAUTH.items() if key != "secrets"}
        values |= {"existingSecret": "kafka-oauth",
                   "secretKeys": {"kafkaSaslOauthClientSecret": "client-secret"}}
        cluster["kafka-oauth"] = {"client-secret": OAUTH_CLIENT_SECRET.encode()}
    manifests = render(values)
    settings = worker_settings(monkeypatch, pod_environment(manifests, cluster, tmp_path))

    assert settings.kafka_security_protocol == "SASL_SSL"
    assert settings.kafka_sasl_mechanism == "OAUTHBEARER"
    assert settings.kafka_sasl_oauth_token_endpoint_url == TOKEN_ENDPOINT
    assert settings.kafka_sasl_oauth_client_id == "groundedness-worker"
    assert settings.kafka_sasl_oauth_scope == "kafka profile"
    assert settings.kafka_sasl_oauth_client_secret is not None
    assert settings.kafka_sasl_oauth_client_secret.get_secret_value() == OAUTH_CLIENT_SECRET
    assert settings.kafka_sasl_username is None
    assert settings.kafka_sasl_password is None
    options = client_options(settings, "helm-test")
    assert options["sasl_mechanism"] == "OAUTHBEARER"
    assert "sasl_oauth_token_provider" in options

    # The client secret is only ever in a Secret, referenced by the pod and by KEDA.
    for manifest in manifests:
        if manifest["kind"] != "Secret":
            assert all(OAUTH_CLIENT_SECRET not in text for text in iter_strings(manifest))
    [ref] = [e["valueFrom"]["secretKeyRef"] for e in worker(manifests)["env"]
             if e["name"] == "KAFKA_SASL_OAUTH_CLIENT_SECRET"]
    password = scaler_auth(manifests)["password"]
    assert (password["name"], password["key"]) == (ref["name"], ref["key"])


def test_keda_fetches_its_token_as_the_worker_does(
    render: Callable[[Values], list[Manifest]], strimzi: ClusterSecrets, pki: Pki,
) -> None:
    manifests = render(OAUTH)
    assert set(scaler_auth(manifests)) <= KEDA_KAFKA_AUTH_PARAMETERS
    # KEDA's client-credentials flow takes the client id and secret as username and
    # password, and its scopes as a comma list.
    assert scaler_parameters(manifests, strimzi) == {
        "sasl": "oauthbearer", "username": "groundedness-worker",
        "password": OAUTH_CLIENT_SECRET, "oauthTokenEndpointUri": TOKEN_ENDPOINT,
        "scopes": "kafka,profile", "tls": "enable", "ca": pki.ca_crt.decode(),
    }


def test_oauth_with_a_client_certificate(
    render: Callable[[Values], list[Manifest]], strimzi: ClusterSecrets, pki: Pki,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both at once: the token over SASL, and a certificate the listener asks for.
    values: Values = {**OAUTH, "kafka": {**OAUTH["kafka"], "tls": {
        "caSecret": CLUSTER_CA_SECRET, "clientSecret": KAFKA_USER}}}
    manifests = render(values)
    settings = worker_settings(monkeypatch, pod_environment(manifests, strimzi, tmp_path))
    assert settings.kafka_sasl_mechanism == "OAUTHBEARER"
    assert settings.kafka_ssl_certfile is not None
    assert Path(settings.kafka_ssl_certfile).read_bytes() == pki.user_crt
    assert {"sasl", "username", "password", "cert", "key"} <= set(scaler_auth(manifests))


# --- Amazon MSK IAM ---


def test_msk_iam_values_reach_the_worker_and_sign_for_the_region(
    render: Callable[[Values], list[Manifest]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifests = render(MSK_IAM)
    environment = pod_environment(manifests, {}, tmp_path)
    settings = worker_settings(monkeypatch, environment)

    assert settings.kafka_sasl_mechanism == "OAUTHBEARER"
    assert settings.kafka_sasl_oauth_provider == "aws_msk_iam"
    assert settings.aws_region == MSK_REGION
    # No OAuth client: nothing to fetch a token from, no secret in the pod or the release.
    assert settings.kafka_sasl_oauth_token_endpoint_url is None
    assert settings.kafka_sasl_oauth_client_secret is None
    assert {m["metadata"]["name"] for m in manifests if m["kind"] == "Secret"} == {
        f"{FULLNAME}-keda-kafka"}  # KEDA's non-secret parameters only
    assert not any("valueFrom" in variable for variable in worker(manifests)["env"])
    # The region is a literal of the container's env: EKS's IRSA webhook adds its own
    # AWS_REGION there, which would win over the ConfigMap's.
    assert {"name": "AWS_REGION", "value": MSK_REGION} in worker(manifests)["env"]

    options = client_options(settings, "helm-test")
    provider = options["sasl_oauth_token_provider"]
    assert isinstance(provider, MskIamTokenProvider)
    # AWS's signer, with credentials as the standard chain finds them (static ones here: IRSA's
    # web identity would need STS), signs a Connect URL for the values' region.
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    token, _ = asyncio.run(provider.fetch())
    url = urlparse(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
    assert url.netloc == f"kafka.{MSK_REGION}.amazonaws.com"


@pytest.mark.parametrize(("keda", "identity"), [
    ({}, {"provider": "aws", "identityOwner": "workload"}),
    ({"awsIdentityOwner": "keda"}, {"provider": "aws", "identityOwner": "keda"}),
    ({"awsRoleArn": "arn:aws:iam::123456789012:role/keda-msk"},
     {"provider": "aws", "roleArn": "arn:aws:iam::123456789012:role/keda-msk"}),
], ids=["workload-role", "keda-role", "role-arn"])
def test_keda_signs_its_own_msk_iam_token(
    render: Callable[[Values], list[Manifest]], keda: Values, identity: dict[str, str],
) -> None:
    manifests = render({**MSK_IAM, "keda": {**KEDA, **keda}})
    auth = one(manifests, "TriggerAuthentication")["spec"]
    assert set(scaler_auth(manifests)) <= KEDA_KAFKA_AUTH_PARAMETERS
    # KEDA's Kafka scaler: oauthbearer with the aws_msk_iam token provider (TLS required), the
    # region in the trigger's metadata, AWS credentials from its "aws" pod identity.
    assert scaler_parameters(manifests, {}) == {
        "sasl": "oauthbearer", "saslTokenProvider": "aws_msk_iam", "tls": "enable"}
    assert auth["podIdentity"] == identity
    trigger = one(manifests, "ScaledObject")["spec"]["triggers"][0]
    assert trigger["metadata"]["awsRegion"] == MSK_REGION
    assert trigger["metadata"]["bootstrapServers"] == MSK_BOOTSTRAP


def test_without_msk_iam_keda_has_no_aws_identity(
    render: Callable[[Values], list[Manifest]],
) -> None:
    manifests = render(OAUTH)
    assert "podIdentity" not in one(manifests, "TriggerAuthentication")["spec"]
    assert "awsRegion" not in one(manifests, "ScaledObject")["spec"]["triggers"][0]["metadata"]
    assert "KAFKA_SASL_OAUTH_PROVIDER" not in one(manifests, "ConfigMap")["data"]


# --- hostname verification ---


@pytest.mark.parametrize("check", [True, False, None], ids=["on", "off", "unset"])
def test_hostname_verification_reaches_the_worker(
    render: Callable[[Values], list[Manifest]], strimzi: ClusterSecrets, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, check: bool | None,
) -> None:
    tls: Values = {"caSecret": CLUSTER_CA_SECRET}
    if check is not None:
        tls["checkHostname"] = check
    manifests = render({**NO_JUDGE, "kafka": {"securityProtocol": "SSL", "tls": tls},
                        "keda": KEDA})
    data = one(manifests, "ConfigMap")["data"]
    settings = worker_settings(monkeypatch, pod_environment(manifests, strimzi, tmp_path))

    expected = check is not False
    assert ("KAFKA_SSL_CHECK_HOSTNAME" in data) is not expected  # rendered only when off
    assert settings.kafka_ssl_check_hostname is expected
    context = client_options(settings, "helm-test")["ssl_context"]
    assert context.check_hostname is expected
    # KEDA's unsafeSsl would drop the chain's verification too: never rendered.
    trigger = one(manifests, "ScaledObject")["spec"]["triggers"][0]
    assert "unsafeSsl" not in trigger["metadata"]


# --- helm lint, and what must not render ---


@pytest.mark.parametrize("values", [STRIMZI_MTLS, OAUTH, MSK_IAM],
                         ids=["strimzi-mtls", "oauth", "msk-iam"])
def test_lint_passes(helm: Helm, values: Values) -> None:
    result = helm.run("lint", str(CHART), "--strict", values=values)
    assert result.returncode == 0, result.stdout + result.stderr


def _oauth(**oauth: str) -> Values:
    return {**NO_JUDGE, "secrets": {"kafkaSaslOauthClientSecret": OAUTH_CLIENT_SECRET},
            "kafka": {"securityProtocol": "SASL_SSL",
                      "sasl": {"mechanism": "OAUTHBEARER", "oauth": oauth}}}


def _mtls(**tls: str | None) -> Values:
    return {**NO_JUDGE, "kafka": {"securityProtocol": "SSL", "tls": tls}}


def _msk(protocol: str = "SASL_SSL", **oauth: str) -> Values:
    return {**NO_JUDGE, "kafka": {"securityProtocol": protocol, "sasl": {
        "mechanism": "OAUTHBEARER", "oauth": {"provider": "aws_msk_iam", **oauth}}}}


SKIP_SCHEMA = ("--skip-schema-validation",)

# Values that must fail to render: (values, extra helm arguments, a fragment of the message).
# The schema's messages name the value at fault; the templates' say what to do.
REFUSED: dict[str, tuple[Values, tuple[str, ...], str]] = {
    "oauth-without-token-endpoint": (
        _oauth(clientId="gw"), (), "at '/kafka/sasl/oauth/tokenEndpointUrl'"),
    "oauth-without-token-endpoint-template-check": (
        _oauth(clientId="gw"), SKIP_SCHEMA,
        "kafka.sasl.mechanism is OAUTHBEARER: set kafka.sasl.oauth.tokenEndpointUrl"),
    "oauth-token-endpoint-not-a-url": (
        _oauth(clientId="gw", tokenEndpointUrl="sso.example.test/token"), (),
        "at '/kafka/sasl/oauth/tokenEndpointUrl'"),
    "oauth-token-endpoint-not-a-url-template-check": (
        _oauth(clientId="gw", tokenEndpointUrl="sso.example.test/token"), SKIP_SCHEMA,
        'kafka.sasl.oauth.tokenEndpointUrl must be an http(s) URL, got "sso.example.test/token"'),
    "oauth-without-client-id": (
        _oauth(tokenEndpointUrl=TOKEN_ENDPOINT), (), "at '/kafka/sasl/oauth/clientId'"),
    "oauth-without-client-id-template-check": (
        _oauth(tokenEndpointUrl=TOKEN_ENDPOINT), SKIP_SCHEMA,
        "kafka.sasl.mechanism is OAUTHBEARER: set kafka.sasl.oauth.clientId"),
    "oauth-without-client-secret": (
        {**_oauth(tokenEndpointUrl=TOKEN_ENDPOINT, clientId="gw"), "secrets": {}}, (),
        "kafka.sasl.mechanism is OAUTHBEARER: set secrets.kafkaSaslOauthClientSecret or "
        "existingSecret (key KAFKA_SASL_OAUTH_CLIENT_SECRET)"),
    "oauth-with-a-username": (
        {**NO_JUDGE, "secrets": {"kafkaSaslOauthClientSecret": OAUTH_CLIENT_SECRET},
         "kafka": {"securityProtocol": "SASL_SSL", "sasl": {
             "mechanism": "OAUTHBEARER", "username": "gw",
             "oauth": {"tokenEndpointUrl": TOKEN_ENDPOINT, "clientId": "gw"}}}}, (),
        "kafka.sasl.username is not used with OAUTHBEARER"),
    "oauth-values-with-scram": (
        {**NO_JUDGE, "secrets": {"kafkaSaslPassword": "pw"},
         "kafka": {"securityProtocol": "SASL_SSL", "sasl": {
             "mechanism": "SCRAM-SHA-512", "username": "gw",
             "oauth": {"tokenEndpointUrl": TOKEN_ENDPOINT}}}}, (),
        'kafka.sasl.oauth.* is set but kafka.sasl.mechanism is "SCRAM-SHA-512"'),
    "oauth-without-sasl-protocol": (
        {**NO_JUDGE, "kafka": {"securityProtocol": "SSL", "sasl": {
            "mechanism": "OAUTHBEARER",
            "oauth": {"tokenEndpointUrl": TOKEN_ENDPOINT, "clientId": "gw"}}}}, (),
        "kafka.sasl.* is set but kafka.securityProtocol is SSL"),
    "msk-iam-without-region": (_msk(), (), "at '/kafka/sasl/oauth/awsRegion'"),
    "msk-iam-without-region-template-check": (
        _msk(), SKIP_SCHEMA,
        "kafka.sasl.oauth.provider is aws_msk_iam: set kafka.sasl.oauth.awsRegion"),
    "msk-iam-without-tls": (
        _msk("SASL_PLAINTEXT", awsRegion=MSK_REGION), (),
        "kafka.sasl.oauth.provider is aws_msk_iam but kafka.securityProtocol is SASL_PLAINTEXT"),
    "msk-iam-with-an-oauth-client": (
        _msk(awsRegion=MSK_REGION, tokenEndpointUrl=TOKEN_ENDPOINT), (),
        "kafka.sasl.oauth.tokenEndpointUrl / clientId / scope are not used with "
        "kafka.sasl.oauth.provider aws_msk_iam"),
    "aws-region-with-an-oauth-client": (
        _oauth(tokenEndpointUrl=TOKEN_ENDPOINT, clientId="gw", awsRegion=MSK_REGION), (),
        "kafka.sasl.oauth.awsRegion is set but kafka.sasl.oauth.provider is not aws_msk_iam"),
    "msk-iam-with-scram": (
        {**NO_JUDGE, "secrets": {"kafkaSaslPassword": "pw"},
         "kafka": {"securityProtocol": "SASL_SSL", "sasl": {
             "mechanism": "SCRAM-SHA-512", "username": "gw",
             "oauth": {"provider": "aws_msk_iam"}}}}, (),
        'kafka.sasl.oauth.* is set but kafka.sasl.mechanism is "SCRAM-SHA-512"'),
    "hostname-check-off-without-tls": (
        {**NO_JUDGE, "kafka": {"tls": {"checkHostname": False}}}, (),
        "kafka.tls.checkHostname is false but kafka.securityProtocol is PLAINTEXT"),
    "client-key-without-certificate": (
        _mtls(clientSecret=KAFKA_USER, certKey=None), (),
        "at '/kafka/tls': missing property 'certKey'"),
    "client-key-without-certificate-template-check": (
        _mtls(clientSecret=KAFKA_USER, certKey=None), SKIP_SCHEMA,
        "kafka.tls.clientSecret is set without kafka.tls.certKey: a client key needs its "
        "certificate"),
    "client-certificate-without-key-template-check": (
        _mtls(clientSecret=KAFKA_USER, keyKey=None), SKIP_SCHEMA,
        "kafka.tls.clientSecret is set without kafka.tls.keyKey"),
    "key-password-without-key": (
        _mtls(keyPasswordKey="key-password"), (), "at '/kafka/tls/clientSecret'"),
    "key-password-without-key-template-check": (
        _mtls(keyPasswordKey="key-password"), SKIP_SCHEMA,
        "kafka.tls.keyPasswordKey is set without kafka.tls.clientSecret"),
    "client-certificate-without-tls": (
        {**NO_JUDGE, "kafka": {"tls": {"clientSecret": KAFKA_USER}}}, (),
        "a client certificate is configured (kafka.tls.clientSecret) but "
        "kafka.securityProtocol is PLAINTEXT: use SSL or SASL_SSL"),
    "two-ca-sources": (
        _mtls(caSecret="a", caConfigMap="b"), (), "at '/kafka/tls'"),
    "two-ca-sources-template-check": (
        _mtls(caSecret="a", caConfigMap="b"), SKIP_SCHEMA,
        "set only one of kafka.tls.caSecret and kafka.tls.caConfigMap"),
}


@pytest.mark.parametrize(("values", "extra_args", "message"), list(REFUSED.values()),
                         ids=list(REFUSED))
def test_inconsistent_values_are_refused(
    helm: Helm, values: Values, extra_args: tuple[str, ...], message: str
) -> None:
    result = helm.template(values, *extra_args)
    assert result.returncode != 0
    assert message in result.stderr
