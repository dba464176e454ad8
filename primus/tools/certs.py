"""A local certificate authority: a CA and the certificates it signs (server and client use), for `primus up --tls`."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from primus.runtime import hosts

VALID_DAYS = 365


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Primus local CA"), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def create_ca(directory: Path, common_name: str = "Primus local CA") -> Issued:
    """A self-signed CA in directory (ca.pem, ca-key.pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    issued = Issued(directory / "ca.pem", directory / "ca-key.pem")
    _write(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
    _write(issued.key, _key_pem(key), private=True)
    return issued


def default_hosts() -> list[str]:
    """The names a local service is reached by: 127.0.0.1, ::1, localhost, this machine's host name and its routable
    address (what services bound to all interfaces, and executors on a Ray node of this machine, advertise)."""
    return sorted({"127.0.0.1", "::1", "localhost", socket.gethostname(), hosts.routable_ip()})


def issue(ca: Issued, directory: Path, name: str, hosts: list[str] | None = None, server: bool = True, client: bool = True) -> Issued:
    """A certificate signed by ca (NAME.pem, NAME-key.pem), for server and/or client use, with hosts as SANs."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = [*([ExtendedKeyUsageOID.SERVER_AUTH] if server else []), *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
    sans: list[x509.GeneralName] = []
    for host in hosts if hosts is not None else default_hosts():
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    issued = Issued(directory / f"{name}.pem", directory / f"{name}-key.pem")
    _write(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
    _write(issued.key, _key_pem(key), private=True)
    return issued
