"""The proxy's local certificate authority: one CA per folder, a leaf certificate per host.

In forward mode the proxy intercepts ``CONNECT`` tunnels, so it must present, for every host a
client reaches over https, a certificate that the client trusts.  It does what mitmproxy does:
a CA created once in a per-user folder (or ``--ca-dir``), and leaf certificates minted on demand,
signed by it and cached for the life of the process.

Files in the folder (created 0700):

* ``sakura-http-ca.pem``: the CA's private key and certificate, mode 0600;
* ``sakura-http-ca-cert.pem``: the certificate alone, the file clients are told to trust.

An existing folder is checked before it is used, the way ssh checks a private key: a key others
may read (any group or other permission bit), or a folder or certificate others may write, is
refused with a `ConfigurationError` that says which ``chmod`` fixes it.  It is not fixed
silently: a key that was readable may have been copied already, which only the user can judge
(and then start over with a new CA).

The CA is created with one exclusive `os.link`, so two proxies starting at once on an empty
folder agree on one CA (the loser loads the winner's).  Keys are ECDSA P-256: fast to make, and
accepted by OpenSSL, curl, Python, Node and Go alike.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import ssl
import stat
import sys
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .._exceptions import ConfigurationError

__all__ = [
    "CA_CERT_NAME",
    "CA_KEY_NAME",
    "ENV_CA_DIR",
    "CertificateAuthority",
    "check_permissions",
    "default_ca_dir",
]

CA_KEY_NAME = "sakura-http-ca.pem"
CA_CERT_NAME = "sakura-http-ca-cert.pem"
#: Overrides the default CA folder (``--ca-dir`` and ``ca_dir=`` override it in turn).
ENV_CA_DIR = "SAKURA_HTTP_CA_DIR"

_CA_DAYS = 3650
# Apple platforms reject server certificates valid for more than 825 days; a year is plenty for a
# certificate that lives as long as one proxy process.
_LEAF_DAYS = 365
_ONE_DAY = datetime.timedelta(days=1)


def default_ca_dir() -> Path:
    """``$SAKURA_HTTP_CA_DIR``, else the per-user data folder: ``~/.local/share/sakura-http/ca``
    (``$XDG_DATA_HOME`` when set), ``~/Library/Application Support/sakura-http/ca`` on macOS,
    ``%LOCALAPPDATA%\\sakura-http\\ca`` on Windows."""
    override = os.environ.get(ENV_CA_DIR)
    if override:
        return Path(override)
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":  # pragma: no cover - exercised on macOS only
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "sakura-http" / "ca"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_id(key: ec.EllipticCurvePublicKey) -> x509.SubjectKeyIdentifier:
    return x509.SubjectKeyIdentifier.from_public_key(key)


def _new_ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sakura-http"),
            x509.NameAttribute(NameOID.COMMON_NAME, "sakura-http local CA"),
        ]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _ONE_DAY)
        .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(_key_id(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _pem(key: ec.EllipticCurvePrivateKey, *certs: x509.Certificate) -> bytes:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return data + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _write_private(folder: Path, data: bytes) -> Path:
    """`data` in a new 0600 file in `folder` (its name is returned); the caller moves it."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".sakura-", suffix=".pem")
    try:
        os.chmod(name, 0o600)  # mkstemp already does on POSIX; explicit for the reader
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None


def check_permissions(folder: Path, key_path: Path, cert_path: Path) -> None:
    """Refuse a CA whose key others may read, or whose folder or certificate others may write
    (`ConfigurationError` saying which ``chmod`` fixes it).  POSIX only: elsewhere the modes
    say nothing."""
    if os.name != "posix":  # pragma: no cover - exercised on Windows only
        return
    what = "the proxy's certificate authority"
    mode = _mode(folder)
    if mode is not None and mode & 0o022:
        raise ConfigurationError(
            f"{folder}: the folder of {what} is writable by others (mode {mode:04o}); whoever "
            "can write there can swap the CA the proxy signs with, or the certificate clients "
            f"trust. Run `chmod go-w {folder}` (sakura-http makes it 0700)"
        )
    mode = _mode(key_path)
    if mode is not None and mode & 0o077:
        raise ConfigurationError(
            f"{key_path}: the private key of {what} is open to others (mode {mode:04o}); "
            "whoever read it can impersonate any site to the clients that trust this CA. Run "
            f"`chmod 600 {key_path}` if nobody else could have read it, else delete {folder} "
            "to have a new CA made (clients must then trust the new certificate)"
        )
    mode = _mode(cert_path)
    if mode is not None and mode & 0o022:
        raise ConfigurationError(
            f"{cert_path}: the certificate of {what} is writable by others (mode {mode:04o}); "
            "whoever can write it can make clients trust another CA. Run "
            f"`chmod go-w {cert_path}` (sakura-http makes it 0644)"
        )


class CertificateAuthority:
    """The CA stored in `folder`, created there on first use.

    `cert_path` is the certificate clients should trust; `context_for(host)` is a server-side
    `ssl.SSLContext` presenting a certificate for `host` (a DNS name or an IP address), minted
    on first use and cached.  A folder holding a CA file that cannot be read raises
    `ConfigurationError` naming the file; delete the folder to start over.  So does a CA others
    could read the key of or replace (`check_permissions`).
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_ca_dir()
        self.key_path = self.folder / CA_KEY_NAME
        self.cert_path = self.folder / CA_CERT_NAME
        self._key, self._cert = self._load_or_create()
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def _load_or_create(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_permissions(self.folder, self.key_path, self.cert_path)
        if not self.key_path.exists():
            key, cert = _new_ca()
            temp = _write_private(self.folder, _pem(key, cert))
            try:
                os.link(temp, self.key_path)  # exclusive: fails if another process won
            except FileExistsError:
                pass
            finally:
                temp.unlink()
        key, cert = self._read()
        public = cert.public_bytes(serialization.Encoding.PEM)
        if not self.cert_path.exists() or self.cert_path.read_bytes() != public:
            fd, name = tempfile.mkstemp(dir=self.folder, prefix=".sakura-", suffix=".pem")
            with os.fdopen(fd, "wb") as file:
                file.write(public)
            os.chmod(name, 0o644)
            os.replace(name, self.cert_path)
        return key, cert

    def _read(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        try:
            data = self.key_path.read_bytes()
            key = serialization.load_pem_private_key(data, password=None)
            cert = x509.load_pem_x509_certificate(data)
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"{self.key_path}: cannot read the proxy's certificate authority ({exc}). "
                f"Delete {self.folder} to have a new one made (clients must then trust the new "
                "certificate), or pass another folder with --ca-dir"
            ) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != (
            cert.public_key()
        ):
            raise ConfigurationError(
                f"{self.key_path}: the key and certificate of the proxy's certificate "
                f"authority do not belong together. Delete {self.folder} to have a new one made"
            )
        return key, cert

    def leaf_certificate(self, host: str) -> x509.Certificate:
        """A new certificate for `host`, signed by this CA (not cached; see `context_for`)."""
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        now = _now()
        ca_public = self._cert.public_key()
        assert isinstance(ca_public, ec.EllipticCurvePublicKey)
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._cert.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _ONE_DAY)
            .not_valid_after(
                min(now + datetime.timedelta(days=_LEAF_DAYS), self._cert.not_valid_after_utc)
            )
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(_key_id(self._leaf_key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    def context_for(self, host: str) -> ssl.SSLContext:
        """A server-side TLS context presenting a certificate for `host` (HTTP/1.1 only)."""
        host = host.lower()
        with self._lock:
            context = self._contexts.get(host)
            if context is None:
                context = self._contexts[host] = self._server_context(host)
            return context

    def _server_context(self, host: str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])  # h11 speaks HTTP/1.1: never agree to h2
        # load_cert_chain reads files only: a private temporary file, removed at once.
        chain = _write_private(self.folder, _pem(self._leaf_key, self.leaf_certificate(host)))
        try:
            context.load_cert_chain(chain)
        finally:
            chain.unlink()
        return context
