"""TLS material for a test broker: a CA, broker and client certificates, and the bad ones.

``scripts/kafka-local`` runs this (``certs.py DIR``) the first time a broker starts with
``KAFKA_TLS=1``; tests read the files from the directory it prints (``tls-dir: DIR``). Every
file is PEM, which Kafka reads directly (``ssl.keystore.type=PEM``), as does Python's ``ssl``.

Good material (the broker trusts ``ca.crt`` and serves certificates signed by it):

    ca.crt                    the CA: the broker's truststore, the client's KAFKA_SSL_CAFILE
    broker.pem                the broker's key and certificate (SAN 127.0.0.1 and localhost)
    broker-wrong-host.pem     key and certificate signed by the CA for wrong-host.invalid only
    broker-expired.pem        key and certificate signed by the CA, expired a day ago
    client.crt, client.key    a client certificate signed by the CA (mutual TLS)
    client-encrypted.key      client.key encrypted with the password in client-key.password

Bad material, one file set per failure a client must report:

    untrusted-ca.crt          a CA the broker never heard of (a client trusting only this one
                              rejects the broker: "unknown CA")
    untrusted-client.crt/.key a client certificate signed by untrusted-ca (the broker refuses it)
    expired-client.crt/.key   a client certificate signed by the CA, expired a day ago
    mismatched-client.key     a key that is not client.crt's

Every key is RSA 2048, every certificate lasts VALID_DAYS: `ensure` makes new material when
it is missing or older than REFRESH_DAYS, so a long-lived data dir never serves expired files.

Usage: certs.py DIR   (fresh files into DIR, mode 0600, unless it has them; prints DIR)
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30
REFRESH_DAYS = 7
# Not a secret worth keeping: it guards a throwaway test key, and tests must know it.
CLIENT_KEY_PASSWORD = "client-key-Passw0rd"  # noqa: S105
BROKER_HOSTS = ("127.0.0.1", "localhost")
WRONG_HOST = "wrong-host.invalid"  # .invalid never resolves (RFC 2606)
MARKER = "ca.crt"  # written last, so its presence means a complete set
FILES = (
    "ca.crt", "broker.pem", "broker-wrong-host.pem", "broker-expired.pem",
    "client.crt", "client.key", "client-encrypted.key", "client-key.password",
    "untrusted-ca.crt", "untrusted-client.crt", "untrusted-client.key",
    "expired-client.crt", "expired-client.key", "mismatched-client.key",
)


@dataclass(frozen=True)
class Issued:
    """A private key and the certificate that goes with it."""

    key: rsa.RSAPrivateKey
    cert: x509.Certificate


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "groundedness-worker tests"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _validity(expired: bool) -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC)
    if expired:
        return now - dt.timedelta(days=VALID_DAYS), now - dt.timedelta(days=1)
    # A minute back: a client whose clock lags a little still accepts a fresh certificate.
    return now - dt.timedelta(minutes=1), now + dt.timedelta(days=VALID_DAYS)


def make_ca(common_name: str) -> Issued:
    """A self-signed CA certificate."""
    key = _key()
    not_before, not_after = _validity(expired=False)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, cert)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue(ca: Issued, common_name: str, *, hosts: Sequence[str] = (),
          expired: bool = False) -> Issued:
    """A leaf certificate signed by ``ca``: a server one when ``hosts`` (its SAN) are given,
    else a client one."""
    key = _key()
    not_before, not_after = _validity(expired)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


def key_pem(key: rsa.RSAPrivateKey, password: str | None = None) -> bytes:
    """PKCS#8, the one private key format Kafka's PEM keystore reads; encrypted when a
    password is given."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)


def cert_pem(*certs: x509.Certificate) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def keystore_pem(leaf: Issued, ca: Issued) -> bytes:
    """Key, then the certificate chain (leaf first): a Kafka ``ssl.keystore.type=PEM`` file."""
    return key_pem(leaf.key) + cert_pem(leaf.cert, ca.cert)


def material() -> dict[str, bytes]:
    """Every file, by name (see the module docstring): FILES, the CA last."""
    ca = make_ca("groundedness-test-ca")
    untrusted_ca = make_ca("untrusted-test-ca")
    broker = issue(ca, "kafka-local", hosts=BROKER_HOSTS)
    wrong_host = issue(ca, WRONG_HOST, hosts=(WRONG_HOST,))
    expired_broker = issue(ca, "kafka-local-expired", hosts=BROKER_HOSTS, expired=True)
    client = issue(ca, "groundedness-worker")
    untrusted_client = issue(untrusted_ca, "groundedness-worker")
    expired_client = issue(ca, "groundedness-worker", expired=True)
    files = {
        "broker.pem": keystore_pem(broker, ca),
        "broker-wrong-host.pem": keystore_pem(wrong_host, ca),
        "broker-expired.pem": keystore_pem(expired_broker, ca),
        "client.crt": cert_pem(client.cert),
        "client.key": key_pem(client.key),
        "client-encrypted.key": key_pem(client.key, CLIENT_KEY_PASSWORD),
        "client-key.password": CLIENT_KEY_PASSWORD.encode(),
        "untrusted-ca.crt": cert_pem(untrusted_ca.cert),
        "untrusted-client.crt": cert_pem(untrusted_client.cert),
        "untrusted-client.key": key_pem(untrusted_client.key),
        "expired-client.crt": cert_pem(expired_client.cert),
        "expired-client.key": key_pem(expired_client.key),
        "mismatched-client.key": key_pem(_key()),
        MARKER: cert_pem(ca.cert),
    }
    return files


def write(directory: Path) -> Path:
    """Write a fresh set into ``directory`` (created private); the CA last, so that a set
    interrupted halfway is made again by the next `ensure`."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    (directory / MARKER).unlink(missing_ok=True)
    for name, content in material().items():
        path = directory / name
        tmp = path.with_name(f".{name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        tmp.replace(path)
    return directory


def is_fresh(directory: Path) -> bool:
    """True when ``directory`` holds a complete set younger than REFRESH_DAYS."""
    marker = directory / MARKER
    if not marker.is_file() or not all((directory / name).is_file() for name in FILES):
        return False
    return time.time() - marker.stat().st_mtime < REFRESH_DAYS * 86400


def ensure(directory: Path) -> Path:
    """``directory``, with a fresh set written into it unless it already holds one."""
    return directory if is_fresh(directory) else write(directory)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    print(ensure(Path(argv[0]).resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
