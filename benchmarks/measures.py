"""One measurement, run in a fresh process by `run.py`: ``python measures.py '<json spec>'``.

The spec names a `kind` (a function below) and its arguments; the result is printed as one JSON
object on the last line of stdout.  Each tool is imported only in the process that measures it,
so no tool's patches or imports can change another's figures.  cassetter cannot share the dev
environment with pytest-recording (both own ``--record-mode``), so its process adds the folder
dev.py installs it into (``.venv/sidecar-cassetter``) to ``sys.path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASSETTER_SITE = Path(
    os.environ.get("SAKURA_HTTP_CASSETTER_SITE", ROOT / ".venv" / "sidecar-cassetter")
)


PEER_NAMES = ("vcrpy", "cassetter")


class Unavailable(Exception):
    """A peer that does not import here: the benchmark skips it with this note."""


def import_peer(tool: str) -> Any:
    """Import a peer, or raise `Unavailable` saying why not."""
    if tool == "cassetter":
        sys.path.insert(0, str(CASSETTER_SITE))
    try:
        if tool == "vcrpy":
            import vcr

            return vcr
        import cassetter

        return cassetter
    except ImportError as exc:
        raise Unavailable(f"{tool} does not import here ({exc})") from None


def _import_for(tool: str) -> None:
    """Import what `tool` needs before a clock starts: imports are measure 6, not the others."""
    import httpx  # noqa: F401

    import sakura_http
    import sakura_http._format_fast  # noqa: F401  (msgspec: imported by the first open)

    if tool in PEER_NAMES:
        import_peer(tool)


# --- the ways into a cassette, one per tool ---------------------------------------------------


@contextlib.contextmanager
def replaying(
    tool: str, path: str, *, asynchronous: bool = False, streamed: bool = False
) -> Iterator[Any]:
    """A client (sync or async) that replays `path` with `tool`, the cassette already open.

    The floor answers with a response read in advance, ``Response(content=...)``, or with
    `streamed` one whose body the client reads as it reads a live one (and a replayed one),
    ``Response(stream=ByteStream(...))``."""
    import httpx

    cls = httpx.AsyncClient if asynchronous else httpx.Client
    if tool == "sakura-http":
        from sakura_http import RecordingTransport

        yield cls(transport=RecordingTransport(path))
    elif tool == "vcrpy":
        vcr = import_peer(tool)
        with vcr.VCR(record_mode="none").use_cassette(path, serializer=serializer_of(path)):
            yield cls()
    elif tool == "cassetter":
        cassetter = import_peer(tool)
        with cassetter.use_cassette(path, record_mode="none"):
            yield cls()
    else:  # the floor: a bare MockTransport answering the recorded response from memory
        status, headers, body = _recorded_response(path)

        def answer(request: Any) -> Any:
            if streamed:
                return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))
            return httpx.Response(status, headers=headers, content=body)

        yield cls(transport=httpx.MockTransport(answer))


@contextlib.contextmanager
def recording(tool: str, path: str) -> Iterator[Any]:
    """A sync client recording every request into a fresh `path` with `tool`."""
    import httpx

    if tool == "sakura-http":
        from sakura_http import RecordingTransport

        with httpx.Client(
            transport=RecordingTransport(path, outer=httpx.HTTPTransport(), mode="all")
        ) as client:
            yield client
    elif tool == "vcrpy":
        vcr = import_peer(tool)
        cassette = vcr.VCR(record_mode="all").use_cassette(path, serializer=serializer_of(path))
        with cassette, httpx.Client() as client:
            yield client
    elif tool == "cassetter":
        cassetter = import_peer(tool)
        with cassetter.use_cassette(path, record_mode="all"), httpx.Client() as client:
            yield client
    else:  # the floor: the bare client
        with httpx.Client() as client:
            yield client


def serializer_of(path: str) -> str:
    return "json" if path.endswith(".json") else "yaml"


def _recorded_response(path: str) -> tuple[int, list[tuple[str, str]], bytes]:
    from sakura_http._cassette import load_cassette

    exchange = load_cassette(Path(path)).exchanges[0]
    assert exchange.status is not None
    return exchange.status, list(exchange.response_headers), exchange.response_body


# --- measures ---------------------------------------------------------------------------------


def record(tool: str, path: str, base: str, count: int) -> dict[str, Any]:
    """Measure 4: record `count` GETs from the local server; total and per-exchange times."""
    _import_for(tool)
    times = []
    started = time.perf_counter()  # from opening the cassette to saving it, imports excluded
    with recording(tool, path) as client:
        for i in range(count):
            t = time.perf_counter()
            client.get(f"{base}/items/{i}").read()
            times.append(time.perf_counter() - t)
    total = time.perf_counter() - started  # saving the cassette included
    head = max(1, min(100, count // 10))
    return {
        "total_s": total,
        # the median exchange of each end: one hiccup of the machine does not decide it
        "first_s": statistics.median(times[:head]),
        "last_s": statistics.median(times[-head:]),
    }


def record_alternating(
    path: str, base: str, count: int, asynchronous: bool = False
) -> dict[str, Any]:
    """Measure 4 in one process: the bare client and sakura-http (recording into `path`) get
    the same GETs from the local server in alternating blocks, as `replay_alternating` does; the
    median of the blocks' ratios.  Saving the cassette, once a pass, is in `record`'s total."""
    _import_for("sakura-http")
    urls = [f"{base}/items/{i}" for i in range(count)]
    ratios: list[float] = []
    # Five passes into the same file: the first records a fresh cassette, each later one
    # re-records it (mode all replaces the previous pass's cassette), as a user re-records.
    for _ in range(5):
        if not asynchronous:
            with recording("floor", path) as floor, recording("sakura-http", path) as sakura:
                ratios.extend(_alternate({"floor": floor, "sakura-http": sakura}, urls))
            continue

        async def go() -> None:
            import httpx

            from sakura_http import RecordingTransport

            transport = RecordingTransport(path, outer=httpx.AsyncHTTPTransport(), mode="all")
            async with (
                httpx.AsyncClient() as floor,
                httpx.AsyncClient(transport=transport) as sakura,
            ):
                ratios.extend(await _alternate_async({"floor": floor, "sakura-http": sakura}, urls))

        asyncio.run(go())
    return _median_ratio(ratios)


def _blocks(urls: list[str]) -> list[list[str]]:
    """`urls` after the warm-up one, in blocks of 100."""
    return [urls[start : start + 100] for start in range(1, len(urls), 100)]


#: The headers the anthropic and openai SDKs send on every request beside the client's own
#: (`x-stainless-*`, which matching ignores by default, as it does the idempotency key each of
#: their requests also carries: `_sdk_headers`).
SDK_HEADERS = {
    "x-stainless-lang": "python",
    "x-stainless-package-version": "2.15.0",
    "x-stainless-os": "Linux",
    "x-stainless-arch": "x64",
    "x-stainless-runtime": "CPython",
    "x-stainless-runtime-version": "3.11.7",
    "x-stainless-async": "false",
    "x-stainless-retry-count": "0",
    "x-stainless-read-timeout": "600",
}


def _sdk_headers(sdk: bool) -> Iterator[dict[str, str] | None]:
    """The extra headers of each request in turn: None, or `SDK_HEADERS` and a new
    idempotency key, so that no two requests send the same header list."""
    for number in itertools.count():
        yield {**SDK_HEADERS, "idempotency-key": f"stainless-python-{number}"} if sdk else None


def _turns(
    clients: dict[str, Any], urls: list[str] | dict[str, list[str]]
) -> tuple[dict[str, str], list[list[tuple[str, list[str]]]]]:
    """What `_alternate` sends: each client's warm-up URL, and the block pairs, each a list of
    (client name, its block of URLs) in the order they run (alternating within a pair, so that
    neither client always runs first).  `urls`: the same for both clients, or each client's
    own (by its name)."""
    own = urls if isinstance(urls, dict) else dict.fromkeys(clients, urls)
    blocks = {tool: _blocks(own[tool]) for tool in clients}
    pairs = [
        [(tool, blocks[tool][i]) for tool in sorted(clients, reverse=i % 2 == 1)]
        for i in range(len(blocks["floor"]))
    ]
    return {tool: own[tool][0] for tool in clients}, pairs


def _alternate(
    clients: dict[str, Any], urls: list[str] | dict[str, list[str]], sdk: bool = False
) -> list[float]:
    """Each block's time with sakura-http over the floor's, the two sync clients taking turns
    (see `replay_alternating`, `_turns`), after one warm-up request each; with `sdk`, each
    request carries the headers an LLM SDK sends (`_sdk_headers`)."""
    first, pairs = _turns(clients, urls)
    headers = _sdk_headers(sdk)
    for tool, client in clients.items():
        client.get(first[tool], headers=next(headers))
    ratios = []
    for pair in pairs:
        times = {}
        for tool, block in pair:
            started = time.perf_counter()
            for url in block:
                clients[tool].get(url, headers=next(headers))
            times[tool] = time.perf_counter() - started
        ratios.append(times["sakura-http"] / times["floor"])
    return ratios


async def _alternate_async(
    clients: dict[str, Any], urls: list[str] | dict[str, list[str]], sdk: bool = False
) -> list[float]:
    """`_alternate` for async clients, awaiting each request."""
    first, pairs = _turns(clients, urls)
    headers = _sdk_headers(sdk)
    for tool, client in clients.items():
        await client.get(first[tool], headers=next(headers))
    ratios = []
    for pair in pairs:
        times = {}
        for tool, block in pair:
            started = time.perf_counter()
            for url in block:
                await clients[tool].get(url, headers=next(headers))
            times[tool] = time.perf_counter() - started
        ratios.append(times["sakura-http"] / times["floor"])
    return ratios


def _median_ratio(ratios: list[float]) -> dict[str, Any]:
    ratios.sort()
    return {"ratio": ratios[len(ratios) // 2], "blocks": len(ratios)}


def replay(tool: str, path: str, base: str, count: int, asynchronous: bool) -> dict[str, Any]:
    """Measure 1: per-request time replaying GET /items/<i>, i = 1 .. count - 1, in order, after
    one warm-up request for item 0 (first-use costs: connection pools, lazy imports)."""
    urls = [f"{base}/items/{i}" for i in range(count)]
    if not asynchronous:
        with replaying(tool, path) as client:
            client.get(urls[0])
            started = time.perf_counter()
            for url in urls[1:]:
                client.get(url)
            elapsed = time.perf_counter() - started
        return {"per_request_s": elapsed / (count - 1)}

    async def go() -> float:
        with replaying(tool, path, asynchronous=True) as client:
            await client.get(urls[0])
            started = time.perf_counter()
            for url in urls[1:]:
                await client.get(url)
            return time.perf_counter() - started

    return {"per_request_s": asyncio.run(go()) / (count - 1)}


def replay_alternating(
    path: str,
    base: str,
    count: int,
    asynchronous: bool,
    streamed_floor: bool = False,
    sdk: bool = False,
) -> dict[str, Any]:
    """Measure 1 in one process: sakura-http and the floor replay the same GETs in alternating
    blocks, each block's two times taken a moment apart; the median of the blocks' ratios.
    `streamed_floor`: the floor's response body is read by the client (see `replaying`).
    `sdk`: each request carries the headers an LLM SDK sends, an idempotency key new every
    time among them (`_sdk_headers`).

    A process's speed varies by 10-20% from one process to the next on a shared VM, more than
    the overhead measured; within one process it drifts slowly, so neighbouring blocks see the
    same machine.  Neither patches anything global, so they can share a process (the peers
    cannot).  The order within a pair alternates, so neither always runs first."""
    _import_for("sakura-http")
    urls = [f"{base}/items/{i}" for i in range(count)]
    ratios: list[float] = []
    for _ in range(5):  # five passes, each with fresh clients (a cassette replays once)
        if not asynchronous:
            with (
                replaying("floor", path, streamed=streamed_floor) as floor,
                replaying("sakura-http", path) as sakura,
            ):
                ratios.extend(_alternate({"floor": floor, "sakura-http": sakura}, urls, sdk))
            continue

        async def go() -> None:
            with (
                replaying("floor", path, asynchronous=True, streamed=streamed_floor) as floor,
                replaying("sakura-http", path, asynchronous=True) as sakura,
            ):
                clients = {"floor": floor, "sakura-http": sakura}
                ratios.extend(await _alternate_async(clients, urls, sdk))

        asyncio.run(go())
    return _median_ratio(ratios)


def client_alternating(tool: str, client: str, path: str, base: str, count: int) -> dict[str, Any]:
    """Measure 9 in one process: replaying the GETs of `path` through `client`'s front end
    (requests: `RecordingAdapter`; aiohttp: `RecordingMiddleware`) against that client's mock
    library `tool` serving the cassette's first response for every URL (``responses``,
    ``aioresponses``), in alternating blocks as `replay_alternating` does; every response body
    is read.  Neither the adapter nor ``responses`` patches what the other uses, so their
    sessions run side by side; ``aioresponses`` patches every ``ClientSession`` while it is
    active, so it is started before its block and stopped after it, outside the clock."""
    import re

    try:
        peer = importlib.import_module(tool)
    except ImportError as exc:
        raise Unavailable(f"{tool} does not import here ({exc})") from None
    _import_for("sakura-http")
    status, headers, body = _recorded_response(path)
    served = dict(headers)
    served.pop("content-length", None)  # each library sets its own
    pattern = re.compile(re.escape(base) + r"/items/\d+")
    urls = [f"{base}/items/{i}" for i in range(count)]
    ratios: list[float] = []
    for _ in range(5):  # five passes, each with fresh sessions (a cassette replays once)
        if client == "requests":
            ratios.extend(_requests_blocks(peer, path, pattern, status, served, body, urls))
        else:
            ratios.extend(
                asyncio.run(_aiohttp_blocks(peer, path, pattern, status, served, body, urls))
            )
    return _median_ratio(ratios)


def _requests_blocks(
    responses: Any, path: str, pattern: Any, status: int, headers: dict[str, str], body: bytes,
    urls: list[str],
) -> list[float]:  # fmt: skip
    import requests

    from sakura_http.requests import RecordingAdapter

    with (
        RecordingAdapter(path) as adapter,
        requests.Session() as sakura,
        requests.Session() as mocked,
        responses.RequestsMock(assert_all_requests_are_fired=False) as mock,
    ):
        sakura.mount("http://", adapter)
        mock.add("GET", pattern, body=body, status=status, headers=headers)
        sessions = {"sakura-http": sakura, "floor": mocked}
        for session in sessions.values():
            assert session.get(urls[0]).content == body
        ratios = []
        for i, block in enumerate(_blocks(urls)):
            times = {}
            for tool in sorted(sessions, reverse=i % 2 == 1):
                started = time.perf_counter()
                for url in block:
                    sessions[tool].get(url).content  # noqa: B018  (read, as a test reads it)
                times[tool] = time.perf_counter() - started
            ratios.append(times["sakura-http"] / times["floor"])
        return ratios


async def _aiohttp_blocks(
    aioresponses: Any, path: str, pattern: Any, status: int, headers: dict[str, str],
    body: bytes, urls: list[str],
) -> list[float]:  # fmt: skip
    import aiohttp

    from sakura_http.aiohttp import RecordingMiddleware

    async def get(session: aiohttp.ClientSession, url: str) -> bytes:
        async with session.get(url) as response:
            return await response.read()

    @contextlib.contextmanager
    def serving(tool: str) -> Iterator[None]:
        if tool == "sakura-http":
            yield
            return
        with aioresponses.aioresponses() as mock:
            mock.get(pattern, status=status, headers=headers, body=body, repeat=True)
            yield

    async with (
        RecordingMiddleware(path) as middleware,
        aiohttp.ClientSession(middlewares=[middleware]) as sakura,
        aiohttp.ClientSession() as mocked,
    ):
        sessions = {"sakura-http": sakura, "floor": mocked}
        for tool, session in sessions.items():
            with serving(tool):
                assert await get(session, urls[0]) == body
        ratios = []
        for i, block in enumerate(_blocks(urls)):
            times = {}
            for tool in sorted(sessions, reverse=i % 2 == 1):
                with serving(tool):
                    started = time.perf_counter()
                    for url in block:
                        await get(sessions[tool], url)
                    times[tool] = time.perf_counter() - started
            ratios.append(times["sakura-http"] / times["floor"])
        return ratios


def replay_one(path: str, url: str, count: int) -> dict[str, Any]:
    """Measure 2: per-request time replaying one exchange near the end of a cassette."""
    with replaying("sakura-http", path) as client:
        client.get(url)  # the first play; later ones repeat it, through the same index
        started = time.perf_counter()
        for _ in range(count):
            client.get(url)
        elapsed = time.perf_counter() - started
    return {"per_request_s": elapsed / count}


def size_alternating(small: str, large: str, small_url: str, large_url: str) -> dict[str, Any]:
    """Measure 2 in one process: the last exchange of a small cassette and of a large one
    replayed over and over in alternating blocks of 100 requests, as `replay_alternating`
    replays against its floor (the small cassette stands for the floor here); the median of
    the blocks' ratios, large over small.  A process's speed varies by 10-20% from one
    process to the next on a shared VM, which `replay_one` in separate processes carries."""
    _import_for("sakura-http")
    ratios: list[float] = []
    for _ in range(5):  # five passes, each with fresh clients
        with (
            replaying("sakura-http", small) as few,
            replaying("sakura-http", large) as many,
        ):
            urls = {"floor": [small_url] * 1001, "sakura-http": [large_url] * 1001}
            ratios.extend(_alternate({"floor": few, "sakura-http": many}, urls))
    return _median_ratio(ratios)


def load(tool: str, path: str) -> dict[str, Any]:
    """Measure 3: open a cassette, ready to replay (sakura-http: transport built, index made).
    Every module is imported before the clock starts."""
    import orjson

    _import_for(tool)
    started = time.perf_counter()
    if tool == "floor":  # read the file and orjson.loads every line, nothing else
        data = Path(path).read_bytes()
        parsed = [orjson.loads(line) for line in data.splitlines() if line.strip()]
        assert parsed
    elif tool == "sakura-http":
        from sakura_http import RecordingTransport

        RecordingTransport(path)  # reads and checks every line; the index is built on first use
    elif tool == "vcrpy":
        vcr = import_peer(tool)
        with vcr.VCR(record_mode="none").use_cassette(path, serializer=serializer_of(path)):
            pass
    else:
        try:
            with import_peer(tool).use_cassette(path, record_mode="none"):
                pass
        except Exception as exc:  # cassetter 0.16 refuses YAML of more than 250,000 nodes
            return {"failed": f"{tool} could not open {Path(path).name}: {exc}"}
    return {"load_s": time.perf_counter() - started}


def first_request(path: str, url: str) -> dict[str, Any]:
    """Measure 3: the first replayed request after opening, which builds the match index."""
    import httpx

    from sakura_http import RecordingTransport

    client = httpx.Client(transport=RecordingTransport(path))
    started = time.perf_counter()
    client.get(url)
    return {"first_s": time.perf_counter() - started}


def _peak_rss() -> int:
    """Peak resident set size of this process in bytes (VmHWM, reset by `_reset_peak`)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int:
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return _peak_rss()


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Linux: reset the peak RSS (VmHWM) to the current RSS
        return True
    except OSError:
        return False


def stream_big(path: str, url: str) -> dict[str, Any]:
    """Measure 5: replay one large body in chunks: throughput and peak RSS over the baseline."""
    import httpx

    from sakura_http import RecordingTransport

    _import_for("sakura-http")  # the modules' own memory is not the body's
    baseline = _current_rss()
    can_reset = _reset_peak()
    transport = RecordingTransport(path)
    load_peak = _peak_rss() - baseline
    size = 0
    with httpx.Client(transport=transport) as client:
        with client.stream("GET", url) as response:  # warm up; the next request repeats it
            response.read()
            del response
        loaded = _current_rss()
        _reset_peak()
        started = time.perf_counter()
        with client.stream("GET", url) as response:
            for chunk in response.iter_bytes():
                size += len(chunk)
        elapsed = time.perf_counter() - started
    replay_peak = _peak_rss() - (loaded if can_reset else baseline)
    return {
        "bytes": size,
        "throughput_bps": size / elapsed,
        "load_peak_bytes": load_peak,
        "replay_peak_bytes": replay_peak,
        "peak_reset": can_reset,
    }


def _first_chunk_time(client: Any, url: str) -> float:
    started = time.perf_counter()
    with client.stream("GET", url) as response:
        for _ in response.iter_raw():
            return time.perf_counter() - started
    raise AssertionError("the stream had no chunk")


def first_chunk(tool: str, path: str, url: str, count: int) -> dict[str, Any]:
    """Measure 5: time to the first chunk of a recorded SSE stream (replayed from `path`), or of
    the live stream at `url` while recording with ``stream_through=True``."""
    import statistics

    import httpx

    from sakura_http import RecordingTransport

    if tool == "floor-replay":  # a MockTransport streaming the same chunks from memory
        from sakura_http._cassette import load_cassette

        exchange = load_cassette(Path(path)).exchanges[0]
        body, sizes = exchange.response_body, exchange.chunks or (len(exchange.response_body),)

        def pieces() -> Iterator[bytes]:
            position = 0
            for size in sizes:
                yield body[position : position + size]
                position += size

        def answer(request: Any) -> Any:
            return httpx.Response(200, headers=exchange.response_headers, content=pieces())

        client = httpx.Client(transport=httpx.MockTransport(answer))
    elif tool == "sakura-http-replay":
        client = httpx.Client(transport=RecordingTransport(path))
    elif tool == "floor-live":
        client = httpx.Client()
    else:  # sakura-http-stream-through
        transport = RecordingTransport(
            path, outer=httpx.HTTPTransport(), mode="all", stream_through=True
        )
        client = httpx.Client(transport=transport)
    with client:
        _first_chunk_time(client, url)  # warm up: connection, imports
        times = [_first_chunk_time(client, url) for _ in range(count)]
    return {"first_chunk_s": statistics.median(times)}


def import_time(tool: str) -> dict[str, Any]:
    """Measure 6: import time on top of ``import httpx, pytest``, and what got imported."""
    import httpx  # noqa: F401
    import pytest  # noqa: F401

    before = set(sys.modules)
    started = time.perf_counter()
    if tool == "sakura-http":
        import sakura_http
        import sakura_http.pytest_plugin  # noqa: F401
    else:
        import_peer(tool)
    elapsed = time.perf_counter() - started
    new = set(sys.modules) - before
    heavy = sorted(
        name
        for name in new
        if name.split(".")[0] in {"yaml", "cryptography", "anthropic", "openai", "h11", "brotli"}
        and "." not in name
    )
    return {"import_s": elapsed, "heavy_modules": heavy}


def scale(tool: str, src: str, dst: str, count: int, base: str) -> dict[str, Any]:
    """Build a `count`-exchange cassette for `tool` from the first exchange of a recorded one,
    each a GET of ``/items/<i>`` (prepares measures 1-3; not timed)."""
    if tool == "sakura-http":
        from sakura_http._format import encode_exchange, encode_header, parse_cassette

        template = parse_cassette(Path(src).read_bytes(), src).exchanges[0]
        import dataclasses

        lines = [encode_header()]
        for i in range(count):
            body = b'{"id":%d,"name":"item %d","tags":["a","b"],"ok":true}' % (i, i)
            headers = tuple(
                (n, str(len(body)) if n == "content-length" else v)
                for n, v in template.response_headers
            )
            lines.append(
                encode_exchange(
                    dataclasses.replace(
                        template,
                        url=f"{base}/items/{i}",
                        response_headers=headers,
                        response_body=body,
                    )
                )
            )
        Path(dst).write_bytes(b"".join(lines))
        return {}
    import copy

    import yaml

    text = Path(src).read_text()
    data = json.loads(text) if src.endswith(".json") else yaml.safe_load(text)
    template = data["interactions"][0]
    interactions = []
    for i in range(count):
        item = copy.deepcopy(template)
        item["request"]["uri"] = f"{base}/items/{i}"
        interactions.append(item)
    data["interactions"] = interactions
    if dst.endswith(".json"):
        Path(dst).write_text(json.dumps(data, indent=4))
    else:
        Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        Path(dst).write_text(yaml.dump(data, Dumper=Dumper))
    return {}


def big_cassette(dst: str, url: str, size: int, chunk: int) -> dict[str, Any]:
    """A one-exchange cassette with a `size`-byte text body in `chunk`-byte chunks."""
    from sakura_http._format import Exchange, encode_exchange, encode_header

    body = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    chunks = tuple(min(chunk, size - i) for i in range(0, size, chunk))
    exchange = Exchange(
        "GET",
        url,
        headers=(("accept", "*/*"),),
        response_headers=(("content-type", "application/octet-stream"),),
        response_body=body,
        chunks=chunks,
    )
    Path(dst).write_bytes(encode_header() + encode_exchange(exchange))
    return {}


def sse_cassette(dst: str, url: str, events: int) -> dict[str, Any]:
    """A one-exchange cassette of a recorded SSE stream, one chunk per event."""
    from sakura_http._format import Exchange, encode_exchange, encode_header

    pieces = [b'data: {"n": %d}\n\n' % i for i in range(events)]
    exchange = Exchange(
        "GET",
        url,
        headers=(("accept", "*/*"),),
        response_headers=(("content-type", "text/event-stream"),),
        response_body=b"".join(pieces),
        chunks=tuple(len(p) for p in pieces),
    )
    Path(dst).write_bytes(encode_header() + encode_exchange(exchange))
    return {}


def rerecorded_cassettes(old: str, new: str, size: int) -> dict[str, Any]:
    """Measure 8: two cassettes of about `size` bytes each, the second a re-recording of the
    first (not timed).  Half the bytes are one exchange whose JSON body lists many similar
    records, the shape that made the diff quadratic; the rest are exchanges of about 20 KB.
    The re-recording changes every response id and one record value in a hundred."""
    import random

    from sakura_http._format import Exchange, encode_exchange, encode_header

    def records(count: int, seed: int | None) -> list[dict[str, Any]]:
        rnd = random.Random(seed)
        return [
            {
                "name": f"row-{i % 300}",
                "value": rnd.randrange(1000, 2000) if seed and rnd.random() < 0.01 else i % 250,
            }
            for i in range(count)
        ]

    def exchange(index: int, count: int, seed: int | None) -> Exchange:
        rnd = random.Random(f"{index}-{seed}")
        body = {"id": f"msg_{rnd.getrandbits(96):024x}", "records": records(count, seed)}
        return Exchange(
            "POST",
            f"https://api.example.test/v1/records/{index}",
            headers=(("content-type", "application/json"),),
            body=json.dumps({"page": index}).encode(),
            response_headers=(("content-type", "application/json"),),
            response_body=json.dumps(body).encode(),
        )

    record_bytes = 38  # about, as json.dumps writes one
    small = 20_000 // record_bytes
    for path, seed in ((old, None), (new, 1)):
        exchanges = [exchange(0, size // 2 // record_bytes, seed)]
        exchanges += [exchange(i, small, seed) for i in range(1, size // 2 // 20_000 + 1)]
        Path(path).write_bytes(encode_header() + b"".join(map(encode_exchange, exchanges)))
    return {"bytes": Path(old).stat().st_size}


def diff(old: str, new: str) -> dict[str, Any]:
    """Measure 8: `sakura-http diff --json OLD NEW` in-process, its output thrown away; the
    command is imported before the clock starts."""
    import io

    from sakura_http.cli import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        started = time.perf_counter()
        code = cli(["diff", "--json", old, new])
        elapsed = time.perf_counter() - started
    assert code == 1, out.getvalue()[-500:]
    return {"diff_s": elapsed}


def h11_floor(path: str) -> None:
    """The proxy's floor, run as its own process (``measures.py --h11-floor PATH``): a minimal
    anyio + h11 server on 127.0.0.1 answering every request with the first recorded response of
    `path`, from memory, keep-alive.  Prints "PORT <n>", serves until stdin closes."""
    import anyio
    import anyio.abc
    import h11

    status, headers, body = _recorded_response(path)
    head = [(name, value) for name, value in headers if name.lower() != "content-length"]
    head.append(("content-length", str(len(body))))

    async def serve_one(stream: anyio.abc.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            async with stream:
                while True:
                    event = connection.next_event()
                    if event is h11.NEED_DATA:
                        connection.receive_data(await stream.receive(65536))
                    elif isinstance(event, h11.EndOfMessage):
                        reply = connection.send(h11.Response(status_code=status, headers=head))
                        reply += connection.send(h11.Data(data=body))  # type: ignore[operator]
                        reply += connection.send(h11.EndOfMessage())  # type: ignore[operator]
                        await stream.send(reply)  # type: ignore[arg-type]
                        connection.start_next_cycle()
                    elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                        return

    async def main() -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        print(f"PORT {listener.extra(anyio.abc.SocketAttribute.local_port)}", flush=True)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, serve_one)
            await anyio.to_thread.run_sync(sys.stdin.read)
            tasks.cancel_scope.cancel()

    anyio.run(main)


@contextlib.contextmanager
def _server_process(args: list[str], ready: Callable[[str], str]) -> Iterator[str]:
    """Run a server in its own process (so it never competes with the clients for the GIL);
    yields the base URL that `ready` reads from its first line of output."""
    import subprocess

    process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield ready(process.stdout.readline())
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.terminate()  # the proxy stops on SIGTERM; the floor when its stdin closes
        process.wait(timeout=60)


def proxy_replay(tool: str, path: str, base: str, count: int, clients: int) -> dict[str, Any]:
    """Measure 7: per-request time of `count` GETs from `clients` keep-alive clients (asyncio
    tasks in this process) through the recording proxy replaying `path` (``sakura-http proxy``,
    mode none, reverse to `base`), or through the anyio + h11 floor, each its own process."""
    import anyio
    import httpx

    if tool == "sakura-http":
        import importlib.util

        if importlib.util.find_spec("sakura_http.proxy") is None:
            raise Unavailable("the proxy has not landed")
        command = [sys.executable, "-m", "sakura_http", "proxy", path, "--upstream", base]
        server = _server_process(command, lambda line: line.split()[4])
    else:
        command = [sys.executable, __file__, "--h11-floor", path]
        server = _server_process(command, lambda line: f"http://127.0.0.1:{line.split()[1]}")

    async def client(url: str, items: range) -> None:
        async with httpx.AsyncClient(base_url=url) as http:
            for i in items:
                (await http.get(f"/items/{i}")).raise_for_status()

    async def go(url: str) -> float:
        await client(url, range(0, 1))  # warm up: the server's first request
        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            for k in range(clients):
                tasks.start_soon(client, url, range(k, count, clients))
        return time.perf_counter() - started

    with server as url:
        elapsed = anyio.run(go, url)
    return {"per_request_s": elapsed / count}


def tls_cert(folder: str) -> dict[str, Any]:
    """Measure 10's https upstream: a certificate for 127.0.0.1 and its key (one PEM file) and
    the CA that signed it, made with trustme (the dev group)."""
    try:
        import trustme
    except ImportError:
        raise Unavailable("trustme is not installed (the dev group): no https rows") from None
    ca = trustme.CA()
    cert, ca_cert = Path(folder) / "upstream.pem", Path(folder) / "upstream-ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    ca.cert_pem.write_to_path(str(ca_cert))
    return {"cert": str(cert), "ca": str(ca_cert)}


def proxy_peer(**spec: Any) -> dict[str, Any]:
    """Measure 10: the proxy against mitmdump (`proxies.proxy_peer`)."""
    import proxies

    try:
        return proxies.proxy_peer(**spec)
    except proxies.Unavailable as exc:
        raise Unavailable(str(exc)) from None


def proxy_record(**spec: Any) -> dict[str, Any]:
    """Measure 10's recordings, made through each proxy before it replays them (not timed)."""
    import proxies

    try:
        proxies.record_urls(**spec)
    except proxies.Unavailable as exc:
        raise Unavailable(str(exc)) from None
    return {}


KINDS: dict[str, Callable[..., dict[str, Any]]] = {
    "proxy_peer": proxy_peer,
    "tls_cert": tls_cert,
    "proxy_record": proxy_record,
    "diff": diff,
    "rerecorded_cassettes": rerecorded_cassettes,
    "proxy_replay": proxy_replay,
    "record": record,
    "replay": replay,
    "replay_one": replay_one,
    "size_alternating": size_alternating,
    "load": load,
    "replay_alternating": replay_alternating,
    "client_alternating": client_alternating,
    "record_alternating": record_alternating,
    "first_request": first_request,
    "stream_big": stream_big,
    "first_chunk": first_chunk,
    "import_time": import_time,
    "scale": scale,
    "big_cassette": big_cassette,
    "sse_cassette": sse_cassette,
}


def main() -> None:
    if sys.argv[1] == "--h11-floor":
        h11_floor(sys.argv[2])
        return
    spec = json.loads(sys.argv[1])
    kind = spec.pop("kind")
    try:
        result = KINDS[kind](**spec)
    except Unavailable as exc:
        result = {"unavailable": str(exc)}
    print(json.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
