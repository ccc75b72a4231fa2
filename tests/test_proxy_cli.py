"""`sakura-http proxy` and `sakura-http ca` as a script uses them: a real process, its ready
line, requests from real clients, and SIGINT / SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.proxy_support import HANG_GUARD, Upstream, start_upstream

READY = re.compile(
    r"^sakura-http proxy listening on (http://127\.0\.0\.1:\d+) \(mode (\w+), cassette (.+)\)$"
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with start_upstream() as running:
        yield running


class ProxyProcess:
    """`sakura-http proxy ...` running; `url` and `mode` come from its ready line."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        command: str | None = None,
        cwd: Path | None = None,
    ) -> None:
        # `command`: the installed script instead of ``python -m sakura_http``.
        start = [command] if command else [sys.executable, "-m", "sakura_http"]
        self.process = subprocess.Popen(
            [*start, "proxy", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            text=True,
            cwd=cwd,
        )
        assert self.process.stdout is not None
        self.ready = self.process.stdout.readline().rstrip("\n")
        match = READY.match(self.ready)
        if match is None:
            _, err = self.process.communicate(timeout=HANG_GUARD)
            raise AssertionError(f"no ready line: {self.ready!r}; stderr: {err}")
        self.url, self.mode, self.cassette = match.groups()

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(signum)
        _, err = self.process.communicate(timeout=HANG_GUARD)
        return self.process.returncode, err


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sakura_http", *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        env={**os.environ, **(env or {})},
    )


def urls(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()[1:]]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_record_with_the_command_then_replay_offline(
    tmp_path: Path, upstream: Upstream, signum: int
) -> None:
    cassette = tmp_path / "cli.jsonl"
    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--mode", "new_episodes")
    assert proxy.mode == "new_episodes" and proxy.cassette == str(cassette)
    live = httpx.get(f"{proxy.url}/v1/items?page=1", timeout=HANG_GUARD)
    code, err = proxy.stop(signum)
    assert code == 0, err
    assert signal.Signals(signum).name in err
    assert urls(cassette) == [f"{upstream.url}/v1/items?page=1"]

    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url)
    assert proxy.mode == "none"
    replayed = httpx.get(f"{proxy.url}/v1/items?page=1", timeout=HANG_GUARD)
    missed = httpx.get(f"{proxy.url}/v1/other", timeout=HANG_GUARD)
    code, err = proxy.stop()
    assert replayed.content == live.content
    assert missed.status_code == 502 and missed.headers["x-sakura-http-error"] == "miss"
    assert f"GET {upstream.url}/v1/other is not in the cassette" in err  # logged on stderr
    assert "restart the proxy with `--mode new_episodes`" in missed.text
    assert len(upstream.requests) == 1


def test_mode_all_replaces_the_file_only_on_a_clean_shutdown(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette = tmp_path / "all.jsonl"
    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--mode", "new_episodes")
    httpx.get(f"{proxy.url}/v1/old", timeout=HANG_GUARD)
    proxy.stop()
    old = cassette.read_bytes()

    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--mode", "all")
    httpx.get(f"{proxy.url}/v1/killed", timeout=HANG_GUARD)
    proxy.process.kill()  # no clean shutdown: the old file stays
    proxy.process.communicate(timeout=HANG_GUARD)
    assert cassette.read_bytes() == old

    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--mode", "all")
    httpx.get(f"{proxy.url}/v1/new", timeout=HANG_GUARD)
    assert cassette.read_bytes() == old  # not before the shutdown
    code, _ = proxy.stop(signal.SIGINT)
    assert code == 0
    assert urls(cassette) == [f"{upstream.url}/v1/new"]


def test_the_record_environment_variables_apply(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "env.jsonl"
    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url, env={"SAKURA_HTTP_RECORD": "new_episodes"}
    )
    assert proxy.mode == "new_episodes"
    httpx.get(f"{proxy.url}/v1/x", timeout=HANG_GUARD)
    proxy.stop()
    assert len(urls(cassette)) == 1

    result = cli(
        "proxy", str(cassette), "--upstream", upstream.url, "--mode", "all",
        env={"SAKURA_HTTP_STRICT": "1"},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == ""
    assert "SAKURA_HTTP_STRICT=1 forbids recording" in result.stderr


def test_an_unreadable_cassette_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    cassette = tmp_path / "bad.jsonl"
    cassette.write_text('{"schema_version":"1.0","kind":"cassette"}\nnot json\n')
    result = cli("proxy", str(cassette), "--upstream", "http://127.0.0.1:9")
    assert result.returncode == 2
    assert f"{cassette}:2" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "ftp://api.example"], "must be an http:// or https:// URL"),
        (["--upstream", "https://api.example?x=1"], "no query"),
        (["--listen", ":0"], "names no address"),
        (["--mode", "sometimes"], "invalid choice"),
        (["--scrub-regex", "("], "regular expression '(' is invalid"),
        (["--ignore-json", "a..b"], "JSON path 'a..b' is malformed"),
        (["--ignore-header", "x run"], "ignore_headers holds 'x run', which is not a header name"),
        (["--shutdown-timeout", "-1"], "shutdown_timeout=-1.0 must be a number of seconds"),
        (["--shutdown-timeout", "nan"], "shutdown_timeout=nan must be a number of seconds"),
        (["--header-timeout", "0"], "header_timeout=0.0 must be a number of seconds, more than 0"),
        (["--idle-timeout", "-2"], "idle_timeout=-2.0 must be a number of seconds, more than 0"),
        (["--max-body-bytes", "-1"], "max_body_bytes must be a whole number of bytes, 0 or more"),
        (["--max-body-bytes", "1e6"], "argument --max-body-bytes: invalid int value: '1e6'"),
        (
            ["--upstream", "a=http://127.0.0.1:9", "--upstream", "http://127.0.0.1:8"],
            "--upstream: to serve several upstreams, name each one",
        ),
        (
            ["--upstream", "a=http://127.0.0.1:9", "--upstream", "a=http://127.0.0.1:8"],
            "--upstream: the name 'a' is given twice",
        ),
        (["--upstream", "a/c=http://127.0.0.1:9"], "upstream='a/c=http://127.0.0.1:9' must be"),
        (["--rules", "json"], "--rules json: give MODULE:NAME"),
        (["--rules", "json:nothing"], "--rules json:nothing: json has no name 'nothing'"),
        (["--rules", "json:dumps"], "json.dumps is a function, not a sakura_http.Rules object"),
        (["--rules", "no_such_rules_mod:R"], "cannot import no_such_rules_mod"),
    ],
)
def test_bad_options_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = cli("proxy", str(tmp_path / "a.jsonl"), *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_port_in_use_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "proxy", str(tmp_path / "a.jsonl"), "--upstream", "http://127.0.0.1:9",
            "--listen", f"127.0.0.1:{port}",
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        f"sakura-http proxy: error: cannot listen on 127.0.0.1:{port} (Address already in "
        "use); pick another address or port (port 0 picks a free one)\n"
    )


def test_forward_mode_tells_where_the_ca_is(tmp_path: Path, upstream: Upstream) -> None:
    ca_dir = tmp_path / "ca"
    result = cli("ca", "--ca-dir", str(ca_dir))
    assert result.returncode == 0
    path = result.stdout.splitlines()[0]
    assert path == str(ca_dir / "sakura-http-ca-cert.pem")
    for hint in ("curl --cacert", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        assert hint in result.stdout

    proxy = ProxyProcess(str(tmp_path / "fwd.jsonl"), "--ca-dir", str(ca_dir), "--mode", "all")
    with httpx.Client(proxy=proxy.url, timeout=HANG_GUARD) as http:
        assert http.get(f"{upstream.url}/v1/fwd").status_code == 200
    proxy.stop()
    assert urls(tmp_path / "fwd.jsonl") == [f"{upstream.url}/v1/fwd"]
    assert result.stdout == cli("ca", "--ca-dir", str(ca_dir)).stdout  # the same CA


def test_the_command_does_not_load_the_proxy_until_asked() -> None:
    code = (
        "import sys; from sakura_http.cli import main, build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith(('cryptography', "
        "'sakura_http.proxy', 'h11'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_help_lists_every_flag() -> None:
    out = cli("proxy", "--help").stdout
    for flag in (
        "--mode", "--listen", "--upstream", "--secret-header", "--record-host",
        "--passthrough-host", "--ca-dir", "--stream-through", "--record-timings",
        "--replay-latency", "--ignore-query", "--ignore-json", "--scrub-json", "--scrub-regex",
        "--shutdown-timeout", "--header-timeout", "--idle-timeout", "--ignore-header",
        "--max-body-bytes", "--scrub-response-header", "--llm", "--rules", "--cassette-dir",
        "--allow-header", "--secret-query-param", "--allow-repeats", "--no-allow-repeats",
        "--record-errors", "--replay-chunk-size", "--upstream-ca", "--upstream-insecure",
    ):  # fmt: skip
        assert flag in out
    from sakura_http.proxy import (
        DEFAULT_HEADER_TIMEOUT,
        DEFAULT_IDLE_TIMEOUT,
        DEFAULT_SHUTDOWN_TIMEOUT,
    )

    # The defaults live in sakura_http.proxy; the help must tell the same ones.
    words = " ".join(out.split())
    assert f"({DEFAULT_SHUTDOWN_TIMEOUT:g}; in mode all" in words
    assert f"request's line and headers ({DEFAULT_HEADER_TIMEOUT:g})" in words
    assert f"leaves its answer unread ({DEFAULT_IDLE_TIMEOUT:g})" in words


def test_rules_from_flags(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "ruled.jsonl"
    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url, "--mode", "new_episodes",
        "--ignore-query", "ts", "--scrub-regex", r"[\w.]+@mail\.example",
        "--ignore-header", "x-run",
    )  # fmt: skip
    live = httpx.get(
        f"{proxy.url}/v1/items?ts=1&who=ada@mail.example",
        headers={"x-run": "1"},
        timeout=HANG_GUARD,
    )
    code, err = proxy.stop()
    assert code == 0, err
    assert urls(cassette) == [f"{upstream.url}/v1/items?ts=1&who=<scrubbed>"]
    assert b"ada@mail.example" not in cassette.read_bytes()

    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url,
        "--ignore-query", "ts", "--scrub-regex", r"[\w.]+@mail\.example",
        "--ignore-header", "x-run",
    )  # fmt: skip
    replayed = httpx.get(
        f"{proxy.url}/v1/items?ts=2&who=bo@mail.example", headers={"x-run": "2"}, timeout=HANG_GUARD
    )
    code, err = proxy.stop()
    assert replayed.status_code == live.status_code == 200, err


def test_max_body_bytes_from_the_command(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "limit.jsonl"
    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url, "--mode", "new_episodes",
        "--max-body-bytes", "1000",
    )  # fmt: skip
    small = httpx.get(f"{proxy.url}/big?size=1000", timeout=HANG_GUARD)
    big = httpx.get(f"{proxy.url}/big?size=1001", timeout=HANG_GUARD)
    code, err = proxy.stop()
    assert code == 0, err
    assert small.status_code == 200 and len(small.content) == 1000
    assert big.status_code == 502 and big.headers["x-sakura-http-error"] == "body-too-large"
    # The fix names the command's own flag, not serve()'s argument.
    assert big.text.rstrip("\n").endswith(
        "response body over 1,000 bytes: sakura-http stores at most 1,000 bytes of a response "
        "body; restart the proxy with `--max-body-bytes 2000`"
    )
    assert urls(cassette) == [f"{upstream.url}/big?size=1000"]


def test_allow_header_and_secret_query_param_from_the_command(
    tmp_path: Path, upstream: Upstream
) -> None:
    # serve(allow_headers=..., secret_query_params=...) as flags: a header of credential shape
    # that is not one is recorded as sent; a query parameter named secret is redacted, on top
    # of the default ones (sig).
    cassette = tmp_path / "allowed.jsonl"
    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url, "--mode", "new_episodes",
        "--allow-header", "x-token-count", "--secret-query-param", "ticket",
    )  # fmt: skip
    live = httpx.get(
        f"{proxy.url}/v1/items?ticket=t-123&sig=s-456&page=1",
        headers={"x-token-count": "5"},
        timeout=HANG_GUARD,
    )
    code, err = proxy.stop()
    assert code == 0, err
    assert live.status_code == 200, live.text
    [written] = [json.loads(line) for line in cassette.read_text().splitlines()[1:]]
    assert ["x-token-count", "5"] in written["headers"]
    assert written["url"] == f"{upstream.url}/v1/items?ticket=<redacted>&sig=<redacted>&page=1"
    assert b"t-123" not in cassette.read_bytes()


def _response_headers(cassette: Path) -> list[dict[str, str]]:
    lines = cassette.read_text().splitlines()[1:]
    return [dict(json.loads(line)["response_headers"]) for line in lines]


def test_scrub_response_header_and_the_llm_preset(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "llm.jsonl"
    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url, "--mode", "new_episodes",
        "--scrub-response-header", "x-trace", "--llm",
    )  # fmt: skip
    live = httpx.get(
        f"{proxy.url}/headers?x-trace=t-1&request-id=req_1&x-kept=k", timeout=HANG_GUARD
    )
    code, err = proxy.stop()
    assert code == 0, err
    # The client gets the live values; the cassette, stable placeholders.
    assert (live.headers["x-trace"], live.headers["request-id"]) == ("t-1", "req_1")
    [written] = _response_headers(cassette)
    assert written["x-trace"] == "<scrubbed>"
    assert written["request-id"] == "<scrubbed>"  # Rules.llm(): a per-call request id
    assert written["x-kept"] == "k"


def test_rules_loaded_from_a_module(tmp_path: Path, upstream: Upstream) -> None:
    # The installed command (not python -m), run from the project's folder, as a user does.
    (tmp_path / "cassette_rules.py").write_text(
        "from sakura_http import Rules, Scrub\n"
        'RULES = Rules(ignore_query=["ts"], scrub=[Scrub.regex(r"ada@mail\\.example")])\n'
    )
    command = Path(sys.executable).with_name("sakura-http")
    cassette = tmp_path / "ruled.jsonl"
    common = (
        "--upstream",
        upstream.url,
        "--rules",
        "cassette_rules:RULES",
        "--ignore-header",
        "x-run",
    )
    proxy = ProxyProcess(
        str(cassette), *common, "--mode", "new_episodes", command=str(command), cwd=tmp_path
    )
    live = httpx.get(
        f"{proxy.url}/v1/items?ts=1&who=ada@mail.example", headers={"x-run": "1"},
        timeout=HANG_GUARD,
    )  # fmt: skip
    code, err = proxy.stop()
    assert code == 0, err
    assert urls(cassette) == [f"{upstream.url}/v1/items?ts=1&who=<scrubbed>"]

    proxy = ProxyProcess(str(cassette), *common, command=str(command), cwd=tmp_path)
    replayed = httpx.get(
        f"{proxy.url}/v1/items?ts=2&who=ada@mail.example", headers={"x-run": "2"},
        timeout=HANG_GUARD,
    )  # fmt: skip
    code, err = proxy.stop()
    assert replayed.status_code == live.status_code == 200, err  # ts and x-run: not matched
    assert len(upstream.requests) == 1


def test_several_named_upstreams(tmp_path: Path, upstream: Upstream) -> None:
    cassette = tmp_path / "named.jsonl"
    with start_upstream() as other:
        proxy = ProxyProcess(
            str(cassette), "--upstream", f"one={upstream.url}", "--upstream", f"two={other.url}",
            "--mode", "new_episodes",
        )  # fmt: skip
        first = httpx.get(f"{proxy.url}/one/v1/a", timeout=HANG_GUARD)
        second = httpx.get(f"{proxy.url}/two/v1/b", timeout=HANG_GUARD)
        code, err = proxy.stop()
    assert code == 0, err
    assert first.json()["path"] == "/v1/a" and second.json()["path"] == "/v1/b"
    assert urls(cassette) == [f"{upstream.url}/v1/a", f"{other.url}/v1/b"]


def test_a_cassette_folder_from_the_command(tmp_path: Path, upstream: Upstream) -> None:
    folder = tmp_path / "cassettes"
    proxy = ProxyProcess(
        "--cassette-dir", str(folder), "--ca-dir", str(tmp_path / "ca"), "--mode", "new_episodes"
    )
    assert proxy.cassette == str(folder / "HOST[_PORT].jsonl")
    with httpx.Client(proxy=proxy.url, timeout=HANG_GUARD) as http:
        assert http.get(f"{upstream.url}/v1/dir").status_code == 200
    code, err = proxy.stop()
    assert code == 0, err
    assert urls(folder / f"127.0.0.1_{upstream.port}.jsonl") == [f"{upstream.url}/v1/dir"]
    both = cli("proxy", str(tmp_path / "a.jsonl"), "--cassette-dir", str(folder))
    neither = cli("proxy", "--upstream", upstream.url)
    assert both.returncode == neither.returncode == 2
    assert "not both" in both.stderr and "neither was given" in neither.stderr


def test_the_health_check_of_the_command(tmp_path: Path, upstream: Upstream) -> None:
    # What a compose healthcheck runs: no curl needed in the proxy's image, only Python.
    proxy = ProxyProcess(str(tmp_path / "h.jsonl"), "--upstream", upstream.url)
    probe = (
        "import sys, urllib.request; "
        "sys.exit(urllib.request.urlopen(sys.argv[1] + '/__sakura-http/health').status != 200)"
    )
    checked = subprocess.run(
        [sys.executable, "-c", probe, proxy.url], capture_output=True, timeout=HANG_GUARD
    )
    code, err = proxy.stop()
    assert checked.returncode == 0, checked.stderr
    assert code == 0, err
    assert upstream.requests == []


def _rerecording_cut_short(
    tmp_path: Path, upstream: Upstream, shutdown_timeout: float
) -> tuple[Path, bytes, ProxyProcess]:
    """A cassette holding /v1/fast and /wait, and a proxy re-recording it (mode all) that has
    recorded /v1/fast and has a /wait in flight that the upstream does not answer."""
    cassette = tmp_path / "slow.jsonl"
    upstream.release.set()
    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--mode", "new_episodes")
    httpx.get(f"{proxy.url}/v1/fast", timeout=HANG_GUARD)
    httpx.get(f"{proxy.url}/wait", timeout=HANG_GUARD)
    assert proxy.stop()[0] == 0
    old = cassette.read_bytes()
    assert urls(cassette) == [f"{upstream.url}/v1/fast", f"{upstream.url}/wait"]

    upstream.release.clear()
    proxy = ProxyProcess(
        str(cassette), "--upstream", upstream.url, "--mode", "all",
        "--shutdown-timeout", str(shutdown_timeout),
    )  # fmt: skip
    httpx.get(f"{proxy.url}/v1/fast", timeout=HANG_GUARD)

    def in_flight() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{proxy.url}/wait", timeout=HANG_GUARD)

    threading.Thread(target=in_flight, daemon=True).start()
    while len(upstream.requests) < 4:  # the request reached the upstream
        threading.Event().wait(0.01)
    return cassette, old, proxy


def test_a_rerecording_that_cancelled_a_request_keeps_the_old_cassette(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette, old, proxy = _rerecording_cut_short(tmp_path, upstream, 0.2)
    code, err = proxy.stop()  # waits 0.2 s for the request, then cancels it
    upstream.release.set()
    assert cassette.read_bytes() == old  # /wait is still there
    assert code == 1, err
    assert err.splitlines()[-1] == (
        f"sakura-http proxy: error: {cassette}: the re-recording (mode all) is incomplete: 1 "
        "request in flight was cancelled when the proxy stopped (after waiting 0.2 s); the old "
        "cassette is kept as it was. Record it again, and let the clients' requests finish "
        "before stopping the proxy, or give them more time with --shutdown-timeout"
    )


def test_a_second_signal_during_a_rerecording_keeps_the_old_cassette_and_says_so(
    tmp_path: Path, upstream: Upstream
) -> None:
    cassette, old, proxy = _rerecording_cut_short(tmp_path, upstream, HANG_GUARD)
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.stderr is not None
    assert "finishing exchanges in flight" in proxy.process.stderr.readline()
    code, err = proxy.stop()
    upstream.release.set()
    assert cassette.read_bytes() == old
    assert code == 1, err
    assert "a second signal stopped the proxy at once; the old cassette is kept" in err


def test_the_timeouts_apply_to_the_command(tmp_path: Path, upstream: Upstream) -> None:
    proxy = ProxyProcess(
        str(tmp_path / "t.jsonl"), "--upstream", upstream.url,
        "--header-timeout", "0.2", "--idle-timeout", "0.2",
    )  # fmt: skip
    port = int(proxy.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as sock:
        sock.sendall(b"GET /v1/slow HTTP/1.1\r\n")  # and no more
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    code, err = proxy.stop()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert code == 0
    assert "sent no complete request head within 0.2 s" in err


def test_a_loose_ca_key_is_refused_by_both_commands(tmp_path: Path) -> None:
    ca_dir = tmp_path / "ca"
    assert cli("ca", "--ca-dir", str(ca_dir)).returncode == 0
    key = ca_dir / "sakura-http-ca.pem"
    key.chmod(0o644)
    for args in (["ca"], ["proxy", str(tmp_path / "a.jsonl")]):
        result = cli(*args, "--ca-dir", str(ca_dir))
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr.startswith(
            f"sakura-http {args[0]}: error: {key}: the private key of the proxy's certificate "
            "authority is open to others (mode 0644)"
        )
        assert f"Run `chmod 600 {key}`" in result.stderr


def test_the_rest_of_serves_options_from_the_command(tmp_path: Path, upstream: Upstream) -> None:
    # Everything serve() accepts, the command accepts: record_errors, allow_repeats and
    # replay_chunk_size too.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{closed.getsockname()[1]}"  # nothing listens there
    cassette = tmp_path / "errors.jsonl"
    proxy = ProxyProcess(str(cassette), "--upstream", nobody, "--mode", "new_episodes",
                         "--record-errors")  # fmt: skip
    failed = httpx.get(f"{proxy.url}/v1/items", timeout=HANG_GUARD)
    code, err = proxy.stop()
    assert code == 0, err
    assert failed.status_code == 502, failed.text
    [written] = [json.loads(line) for line in cassette.read_text().splitlines()[1:]]
    assert written["error"]["type"] == "ConnectError"

    cassette = tmp_path / "once.jsonl"
    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--mode", "new_episodes")
    httpx.get(f"{proxy.url}/v1/items", timeout=HANG_GUARD)
    assert proxy.stop()[0] == 0
    proxy = ProxyProcess(str(cassette), "--upstream", upstream.url, "--no-allow-repeats",
                         "--replay-chunk-size", "7")  # fmt: skip
    first = httpx.get(f"{proxy.url}/v1/items", timeout=HANG_GUARD)
    again = httpx.get(f"{proxy.url}/v1/items", timeout=HANG_GUARD)
    proxy.stop()
    assert first.status_code == 200
    assert again.status_code == 502 and again.headers["x-sakura-http-error"] == "miss"

    bad = cli("proxy", str(cassette), "--replay-chunk-size", "0")
    assert bad.returncode == 2 and "replay_chunk_size" in bad.stderr, bad.stderr


def test_the_upstreams_tls_from_the_command(tmp_path: Path) -> None:
    # serve(verify=...): the CA bundle that signs the upstream's certificate, or no check.
    with start_upstream(tls=True, folder=tmp_path) as secure:
        for args in (["--upstream-ca", str(secure.ca_file)], ["--upstream-insecure"], []):
            cassette = tmp_path / f"tls{len(args)}{args[0][-4:] if args else ''}.jsonl"
            proxy = ProxyProcess(
                str(cassette), "--upstream", secure.url, "--mode", "new_episodes", *args
            )  # fmt: skip
            answer = httpx.get(f"{proxy.url}/v1/items", timeout=HANG_GUARD)
            code, err = proxy.stop()
            assert code == 0, err
            if args:
                assert answer.status_code == 200, (args, answer.text)
            else:  # the default CAs do not know the test's own CA: refused, and said so
                assert answer.status_code == 502, answer.text
    both = cli("proxy", "c.jsonl", "--upstream-ca", "ca.pem", "--upstream-insecure")
    assert both.returncode == 2 and "not allowed with" in both.stderr, both.stderr
