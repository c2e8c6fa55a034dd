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

trustme makes the CAs and certificates (every key RSA 2048). A CA lasts trustme's fixed years
2000-3000, every other certificate VALID_DAYS: `ensure` makes new material when it is missing
or older than REFRESH_DAYS, so a long-lived data dir never serves expired files.

Usage: certs.py DIR   (fresh files into DIR, mode 0600, unless it has them; prints DIR)
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization

VALID_DAYS = 30
REFRESH_DAYS = 7
# Not a secret worth keeping: it guards a throwaway test key, and tests must know it.
CLIENT_KEY_PASSWORD = "client-key-Passw0rd"  # noqa: S105
BROKER_HOSTS = ("127.0.0.1", "localhost")
WRONG_HOST = "wrong-host.invalid"  # .invalid never resolves (RFC 2606)
ORGANIZATION = "groundedness-worker tests"
MARKER = "ca.crt"  # written last, so its presence means a complete set
FILES = (
    "ca.crt", "broker.pem", "broker-wrong-host.pem", "broker-expired.pem",
    "client.crt", "client.key", "client-encrypted.key", "client-key.password",
    "untrusted-ca.crt", "untrusted-client.crt", "untrusted-client.key",
    "expired-client.crt", "expired-client.key", "mismatched-client.key",
)
# A CA or a certificate issued by one: both carry a key, each one certificate.
Issued = trustme.CA | trustme.LeafCert


def make_ca(name: str) -> trustme.CA:
    """A self-signed CA that signs leaves only (its name is the OU: trustme sets no CN)."""
    return trustme.CA(path_length=0, organization_name=ORGANIZATION,
                      organization_unit_name=name, key_type=trustme.KeyType.RSA)


def issue(ca: trustme.CA, common_name: str, *, hosts: Sequence[str] = (),
          expired: bool = False) -> trustme.LeafCert:
    """A leaf certificate signed by ``ca``, for ``hosts`` (its SAN; ``common_name`` when none:
    trustme would write an empty SAN, which RFC 5280 forbids). trustme's leaves serve both
    ends, server and client auth."""
    now = dt.datetime.now(dt.UTC)
    # A minute back: a client whose clock lags a little still accepts a fresh certificate.
    not_before, not_after = ((now - dt.timedelta(days=VALID_DAYS), now - dt.timedelta(days=1))
                             if expired else
                             (now - dt.timedelta(minutes=1), now + dt.timedelta(days=VALID_DAYS)))
    # A fixed OU (trustme's is random): a client's principal stays the same across renewals.
    return ca.issue_cert(*(hosts or (common_name,)), common_name=common_name,
                         organization_name=ORGANIZATION, organization_unit_name="kafka-local",
                         not_before=not_before, not_after=not_after,
                         key_type=trustme.KeyType.RSA)


def cert_pem(*issued: Issued) -> bytes:
    """The certificates of ``issued``, in order (a leaf's own, not its chain)."""
    return b"".join((item.cert_pem if isinstance(item, trustme.CA)
                     else item.cert_chain_pems[0]).bytes() for item in issued)


# What trustme cannot do: it writes keys in OpenSSL's traditional format, unencrypted. Kafka's
# PEM keystore reads PKCS#8 only, and client-encrypted.key needs a password.
def key_pem(issued: Issued, password: str | None = None) -> bytes:
    """PKCS#8, the one private key format Kafka's PEM keystore reads; encrypted when a
    password is given."""
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), password=None)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)


def keystore_pem(leaf: trustme.LeafCert, ca: trustme.CA) -> bytes:
    """Key, then the certificate chain (leaf first): a Kafka ``ssl.keystore.type=PEM`` file."""
    return key_pem(leaf) + cert_pem(leaf, ca)


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
        "client.crt": cert_pem(client),
        "client.key": key_pem(client),
        "client-encrypted.key": key_pem(client, CLIENT_KEY_PASSWORD),
        "client-key.password": CLIENT_KEY_PASSWORD.encode(),
        "untrusted-ca.crt": cert_pem(untrusted_ca),
        "untrusted-client.crt": cert_pem(untrusted_client),
        "untrusted-client.key": key_pem(untrusted_client),
        "expired-client.crt": cert_pem(expired_client),
        "expired-client.key": key_pem(expired_client),
        # Another certificate's key (RSA too, so OpenSSL says KEY_VALUES_MISMATCH).
        "mismatched-client.key": key_pem(issue(ca, "groundedness-worker")),
        MARKER: cert_pem(ca),
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
