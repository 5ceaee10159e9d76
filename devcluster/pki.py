"""Certificates and keys for one cluster, made fresh by every `up` (nothing is reused between clusters).

One CA signs what the cluster's parties present: the API server's serving certificate, each client's certificate
(the admin, the controller manager, the scheduler, each node), and the webhook servers' certificates, so one
caBundle verifies every webhook. The service-account token signer is a key pair of its own, as kubeadm makes it.
ECDSA P-256 keys: the API server takes them for every purpose, and they are fast to make.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=30)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM, and where they were written."""

    cert_pem: bytes
    key_pem: bytes
    cert_file: Path
    key_file: Path


class Authority:
    """The cluster's CA."""

    def __init__(self, folder: Path, name: str = "devcluster-ca") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.folder = folder
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)
        self.cert_file = folder / "ca.crt"
        self.cert_file.write_bytes(self.cert_pem)
        self.key_file = folder / "ca.key"
        self.key_file.write_bytes(_pem_key(self._key))
        self.key_file.chmod(0o600)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> Pair:
        """Sign a certificate for `common_name` and write `<name>.crt` and `<name>.key` beside the CA."""
        key = _key()
        now = datetime.datetime.now(datetime.timezone.utc)
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=_pem_key(key),
            cert_file=self.folder / f"{name}.crt",
            key_file=self.folder / f"{name}.key",
        )
        pair.cert_file.write_bytes(pair.cert_pem)
        pair.key_file.write_bytes(pair.key_pem)
        pair.key_file.chmod(0o600)
        return pair


def signing_key_pair(folder: Path, name: str = "sa") -> tuple[Path, Path]:
    """The service-account token signer: `<name>.key` (private) and `<name>.pub` (public)."""
    key = _key()
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(_pem_key(key))
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public
