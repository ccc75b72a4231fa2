"""The compose example of docs/proxy.md (examples/proxy_compose/compose.yaml), checked without
Docker: its proxy command parses with the real CLI and starts (on 127.0.0.1, against local
upstreams) with the same flags, its health check probes the proxy's own path, and every service
reaches the proxy under a prefix it serves."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import yaml

from sakura_http.cli import build_parser
from sakura_http.proxy import HEALTH_PATH, serve
from tests.proxy_support import HANG_GUARD, start_upstream

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "examples" / "proxy_compose" / "compose.yaml"
DOC = ROOT / "docs" / "proxy.md"


def services() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    found = loaded["services"]
    assert isinstance(found, dict)
    return found


def proxy_args() -> Any:
    command = services()["sakura"]["command"]
    assert command[:2] == ["sakura-http", "proxy"]
    return build_parser().parse_args(command[1:])


def test_the_doc_points_at_the_example() -> None:
    assert "examples/proxy_compose/compose.yaml" in DOC.read_text()


ALIAS = "sakura.test"


def test_the_command_parses_and_listens_where_the_services_call() -> None:
    args = proxy_args()
    port = args.listen.rsplit(":", 1)[1]
    names = {value.split("=", 1)[0] for value in args.upstream}
    assert names == {"payments", "geo"}
    called = [
        value
        for name, service in services().items()
        if name != "sakura"
        for value in service.get("environment", {}).values()
    ]
    assert called
    for url in called:
        match = re.fullmatch(rf"http://{ALIAS}:{port}/(\w+)", url)
        assert match is not None and match.group(1) in names, url
    for name, service in services().items():
        if name != "sakura":
            assert service["depends_on"]["sakura"]["condition"] == "service_healthy"
    # The services call the proxy by a reserved name, its alias on the compose network.
    assert services()["sakura"]["networks"]["default"]["aliases"] == [ALIAS]


def test_the_health_check_probes_the_proxys_own_path() -> None:
    sakura = services()["sakura"]
    port = proxy_args().listen.rsplit(":", 1)[1]
    probe = " ".join(sakura["healthcheck"]["test"])
    assert f"http://127.0.0.1:{port}{HEALTH_PATH}" in probe


def test_the_example_runs_as_configured(tmp_path: Path) -> None:
    # The same options, with local upstreams in place of the example's and a free port.
    args = proxy_args()
    with start_upstream() as payments, start_upstream() as geo:
        local = {"payments": payments.url, "geo": f"{geo.url}/v2"}
        with (
            serve(
                tmp_path / "services.jsonl",
                upstream=local,
                mode="new_episodes",
                secret_headers=args.secret_headers,
            ) as proxy,
            httpx.Client(base_url=proxy.url, timeout=HANG_GUARD) as http,
        ):
            assert http.get(HEALTH_PATH).status_code == 200
            assert http.get("/geo/cities").json()["path"] == "/v2/cities"
            paid = http.post("/payments/charges", headers={"authorization": "Bearer sk-1"})
            assert paid.status_code == 200
    assert "sk-1" not in (tmp_path / "services.jsonl").read_text()
