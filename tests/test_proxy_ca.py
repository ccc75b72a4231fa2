"""The proxy's certificate authority: files, modes, leaf certificates a TLS client accepts."""

from __future__ import annotations

import socket
import ssl
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography import x509

from sakura_http import ConfigurationError
from sakura_http.proxy._ca import (
    CA_CERT_NAME,
    CA_KEY_NAME,
    ENV_CA_DIR,
    CertificateAuthority,
    default_ca_dir,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_the_private_key_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    assert _mode(ca.key_path) == 0o600
    assert _mode(tmp_path / "ca") == 0o700
    assert _mode(ca.cert_path) == 0o644
    assert ca.key_path.name == CA_KEY_NAME and ca.cert_path.name == CA_CERT_NAME
    assert b"PRIVATE KEY" not in ca.cert_path.read_bytes()
    assert sorted(p.name for p in (tmp_path / "ca").iterdir()) == sorted(
        [CA_KEY_NAME, CA_CERT_NAME]
    )  # no temporary file left behind


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620], ids=oct)
def test_a_private_key_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    ca.key_path.chmod(mode)
    with pytest.raises(ConfigurationError) as raised:
        CertificateAuthority(tmp_path / "ca")
    assert str(raised.value) == (
        f"{ca.key_path}: the private key of the proxy's certificate authority is open to "
        f"others (mode {mode:04o}); whoever read it can impersonate any site to the clients "
        f"that trust this CA. Run `chmod 600 {ca.key_path}` if nobody else could have read it, "
        f"else delete {tmp_path / 'ca'} to have a new CA made (clients must then trust the new "
        "certificate)"
    )
    assert _mode(ca.key_path) == mode  # refused, not changed behind the user's back


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722, 0o1777], ids=oct)
def test_a_folder_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "ca"
    CertificateAuthority(folder)
    folder.chmod(mode)
    with pytest.raises(ConfigurationError) as raised:
        CertificateAuthority(folder)
    assert str(raised.value) == (
        f"{folder}: the folder of the proxy's certificate authority is writable by others "
        f"(mode {mode:04o}); whoever can write there can swap the CA the proxy signs with, "
        f"or the certificate clients trust. Run `chmod go-w {folder}` (sakura-http makes it "
        "0700)"
    )


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_a_certificate_others_can_write_is_refused(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    ca.cert_path.chmod(0o666)
    with pytest.raises(ConfigurationError, match=r"writable by others \(mode 0666\)") as raised:
        CertificateAuthority(tmp_path / "ca")
    assert f"chmod go-w {ca.cert_path}" in str(raised.value)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_a_folder_readable_by_others_is_fine(tmp_path: Path) -> None:
    folder = tmp_path / "ca"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)  # a folder the user made with the usual umask: listing it is harmless
    first = CertificateAuthority(folder)
    assert CertificateAuthority(folder).cert_path.read_bytes() == first.cert_path.read_bytes()


def test_a_second_start_reuses_the_ca(tmp_path: Path) -> None:
    first = CertificateAuthority(tmp_path)
    second = CertificateAuthority(tmp_path)
    assert first.cert_path.read_bytes() == second.cert_path.read_bytes()


def test_processes_starting_at_once_agree_on_one_ca(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        authorities = list(pool.map(lambda _: CertificateAuthority(tmp_path), range(8)))
    certs = {ca.leaf_certificate("a.example").issuer.rfc4514_string() for ca in authorities}
    assert len(certs) == 1
    pem = {ca.cert_path.read_bytes() for ca in authorities}
    assert len(pem) == 1


def test_an_unreadable_ca_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / CA_KEY_NAME).write_text("not a key")
    (tmp_path / CA_KEY_NAME).chmod(0o600)  # (a key others may read is refused before it is read)
    with pytest.raises(ConfigurationError, match=CA_KEY_NAME) as raised:
        CertificateAuthority(tmp_path)
    assert "Delete" in str(raised.value)


def test_leaf_certificates_name_the_host(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    dns = ca.leaf_certificate("api.example")
    names = dns.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["api.example"]
    ip = ca.leaf_certificate("127.0.0.1")
    names = ip.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_contexts_are_minted_once_per_host(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    assert ca.context_for("a.example") is ca.context_for("A.example")
    assert ca.context_for("a.example") is not ca.context_for("b.example")


@pytest.mark.parametrize("host", ["upstream.test", "127.0.0.1"])
def test_a_client_trusting_the_ca_accepts_the_leaf(tmp_path: Path, host: str) -> None:
    ca = CertificateAuthority(tmp_path)
    server_context = ca.context_for(host)
    client_context = ssl.create_default_context(cafile=ca.cert_path)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

        thread = threading.Thread(target=accept)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
            client_context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            assert tls.recv(2) == b"ok"
            assert tls.selected_alpn_protocol() in (None, "http/1.1")
        thread.join(30)


def test_default_folder_honours_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CA_DIR, str(tmp_path / "mine"))
    assert default_ca_dir() == tmp_path / "mine"
    monkeypatch.delenv(ENV_CA_DIR)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    if sys.platform.startswith("linux"):
        assert default_ca_dir() == tmp_path / "data" / "sakura-http" / "ca"
