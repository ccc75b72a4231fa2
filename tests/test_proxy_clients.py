"""Clients of other languages sent through the forward proxy the way docs/proxy.md tells: curl with
nothing but `Proxy.env()`, Node (20 with undici's ``EnvHttpProxyAgent``; 22.21 and 24 with
``NODE_USE_ENV_PROXY=1``, which `env()` sets) and Java (a truststore built from the CA and
``-Dhttp.nonProxyHosts=``).  Each records from a local upstream, http and https, then replays with
the upstream stopped.  A client missing from the machine is skipped, saying what it needs;
``SAKURA_HTTP_NODE`` names another node binary than the one on ``PATH``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sakura_http.proxy import Proxy, serve
from tests.proxy_support import HANG_GUARD, start_upstream

# SAKURA_HTTP_NODE points the Node tests at another node than the one on PATH (a newer one
# installed apart, e.g. `npm install --prefix DIR node@24`, to run the NODE_USE_ENV_PROXY test).
NODE = os.environ.get("SAKURA_HTTP_NODE") or shutil.which("node")
JAVA = shutil.which("java")
KEYTOOL = shutil.which("keytool")
CURL = shutil.which("curl")
DOC = Path(__file__).resolve().parent.parent / "docs" / "proxy.md"

# A client prints "STATUS BODY" for each URL it is given.
NODE_FETCH = """
const [setup, ...urls] = process.argv.slice(2);
if (setup === "undici") {
  const { EnvHttpProxyAgent, setGlobalDispatcher } = require("undici");
  setGlobalDispatcher(new EnvHttpProxyAgent());
}
(async () => {
  for (const url of urls) {
    const response = await fetch(url);
    console.log(response.status + " " + (await response.text()));
  }
})().catch((error) => { console.error(error); process.exit(1); });
"""

JAVA_FETCH = """
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Fetch {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newHttpClient();
        for (String url : args) {
            HttpResponse<String> response = client.send(
                HttpRequest.newBuilder(URI.create(url)).build(),
                HttpResponse.BodyHandlers.ofString());
            System.out.println(response.statusCode() + " " + response.body());
        }
    }
}
"""


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Proxies and bypass lists from the developer's shell must not reroute the test clients.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "NODE_USE_ENV_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def node_version() -> tuple[int, int]:
    assert NODE is not None
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = re.match(r"v(\d+)\.(\d+)", out).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def has_undici() -> bool:
    assert NODE is not None
    found = subprocess.run(
        [NODE, "-e", "require.resolve('undici')"], capture_output=True, timeout=HANG_GUARD
    )
    return found.returncode == 0


def record_then_replay(
    tmp_path: Path, run: Callable[[Proxy, list[str]], list[str]], paths: list[str]
) -> None:
    """Record `paths` from an http and an https upstream through a forward proxy with `run`
    (the client, given the proxy and the URLs), then replay them with the upstreams stopped."""
    cassette = tmp_path / "client.jsonl"
    with (
        start_upstream() as plain,
        start_upstream(tls=True, folder=tmp_path) as secure,
    ):
        urls = [f"{base}{path}" for base in (plain.url, secure.url) for path in paths]
        with serve(
            cassette, mode="new_episodes", ca_dir=tmp_path / "ca", verify=secure.ca_file
        ) as proxy:
            live = run(proxy, urls)
        assert len(plain.requests) == len(secure.requests) == len(paths)
    assert [json.loads(line)["url"] for line in cassette.read_text().splitlines()[1:]] == urls
    with serve(cassette, ca_dir=tmp_path / "ca") as proxy:  # mode none: upstreams are gone
        replayed = run(proxy, urls)
    assert replayed == live
    assert all(line.startswith("200 ") for line in live), live


def client_output(command: list[str], env: dict[str, str], cwd: Path | None = None) -> list[str]:
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=HANG_GUARD, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.skipif(CURL is None, reason="needs curl")
def test_curl_with_env_alone(tmp_path: Path) -> None:
    # Only PATH and env(): curl reads http_proxy (lower case) for http:// URLs.
    def run(proxy: Proxy, urls: list[str]) -> list[str]:
        assert CURL is not None
        env = {"PATH": os.environ["PATH"], **proxy.env()}
        return [
            " ".join(reversed(line.rsplit("\n", 1)))
            for url in urls
            for line in [
                subprocess.run(
                    [CURL, "-sS", "-w", "\n%{http_code}", url],
                    env=env, capture_output=True, text=True, timeout=HANG_GUARD, check=True,
                ).stdout
            ]
        ]  # fmt: skip

    record_then_replay(tmp_path, run, ["/v1/curl"])


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_node_with_undici_env_http_proxy_agent(tmp_path: Path) -> None:
    # The Node 20 row of docs/proxy.md: undici's EnvHttpProxyAgent as the global dispatcher.
    if not has_undici():
        pytest.skip("needs the undici package where node finds it (npm install undici, NODE_PATH)")
    script = tmp_path / "fetch.js"
    script.write_text(NODE_FETCH)

    def run(proxy: Proxy, urls: list[str]) -> list[str]:
        assert NODE is not None
        return client_output([NODE, str(script), "undici", *urls], {**os.environ, **proxy.env()})

    record_then_replay(tmp_path, run, ["/v1/node20"])


@pytest.mark.skipif(NODE is None, reason="needs node")
def test_node_fetch_with_node_use_env_proxy(tmp_path: Path) -> None:
    version = node_version()
    if not (version >= (24, 0) or (22, 21) <= version < (23, 0)):
        pytest.skip(
            f"node {version[0]}.{version[1]} ignores NODE_USE_ENV_PROXY (read from 24.0 and "
            "22.21 on); the undici test covers older ones"
        )
    script = tmp_path / "fetch.js"
    script.write_text(NODE_FETCH)

    def run(proxy: Proxy, urls: list[str]) -> list[str]:
        assert NODE is not None
        return client_output([NODE, str(script), "global", *urls], {**os.environ, **proxy.env()})

    record_then_replay(tmp_path, run, ["/v1/node24"])


def java_row() -> str:
    """The Java lines of docs/proxy.md (the block marked ``<!-- java -->``): the test runs them."""
    text = DOC.read_text()
    match = re.search(r"<!-- java -->\n```text\n(.*?)```", text, flags=re.S)
    assert match is not None, "docs/proxy.md lost its Java block"
    return match.group(1)


@pytest.mark.skipif(JAVA is None or KEYTOOL is None, reason="needs java and keytool (a JDK)")
def test_java_http_client_with_the_documented_flags(tmp_path: Path) -> None:
    (tmp_path / "Fetch.java").write_text(JAVA_FETCH)
    lines = [line for line in java_row().splitlines() if line.strip()]
    keytool_line, java_line = lines[0], lines[-1]

    def run(proxy: Proxy, urls: list[str]) -> list[str]:
        assert proxy.ca_cert is not None
        port = proxy.url.rsplit(":", 1)[1]
        truststore = tmp_path / "sakura-ca.p12"
        truststore.unlink(missing_ok=True)
        keytool = keytool_line.replace("CA_CERT", str(proxy.ca_cert))
        subprocess.run(
            keytool, shell=True, cwd=tmp_path, check=True, capture_output=True, timeout=HANG_GUARD
        )
        command = java_line.replace("PORT", port).replace("App", "Fetch.java")
        return client_output(
            ["bash", "-c", f"{command} {' '.join(urls)}"], dict(os.environ), cwd=tmp_path
        )

    record_then_replay(tmp_path, run, ["/v1/java"])


def test_the_doc_has_a_row_for_each_client() -> None:
    text = DOC.read_text()
    for needle in (
        "NODE_USE_ENV_PROXY=1",
        "EnvHttpProxyAgent",
        "-Dhttp.nonProxyHosts=",
        "keytool -importcert",
        "SSL_CERT_FILE",
        "| Go |",
        "| .NET |",
    ):
        assert needle in text, needle
