"""httpx and httpx2 (`sakura_http._libraries`), and the private names of theirs sakura-http
reads (`sakura_http._httpx_internals`).

The probes come first: one per private name, each run against the installed httpx and httpx2.
When a release renames or reshapes one, its probe fails and says what changed and what relies
on it, so the change is noticed here rather than by a user whose replays went slow or whose
bodies stopped being decoded.  docs/architecture.md lists the same names.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pickle
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import anyio
import orjson
import pytest

from sakura_http._exchange import Exchange, FaultInfo, RequestData
from sakura_http._format import header_bytes
from sakura_http._httpx_internals import (
    HEADER_ENTRIES,
    RESPONSE_CONTENT,
    RESPONSE_DECODER,
    WRAPPED_STREAM,
    header_encoding,
    headers_from_entries,
    httpx_decoders,
    set_content,
    uri_reference,
)
from sakura_http._libraries import DefaultOuter, _headers_of, library_of
from sakura_http._matching import canonical_url
from tests.drive import Driver
from tests.servers import LocalServer

URL = "https://api.example.test/v1/items"


def changed(lib: ModuleType, name: str, consequence: str) -> str:
    """The failure message of a probe: which library, which name, what depends on it."""
    return (
        f"{lib.__name__} {lib.__version__} changed {name}, which sakura-http reads in "
        f"sakura_http/_httpx_internals.py: {consequence}. Update that function (and the list in "
        "docs/architecture.md) for this release."
    )


@contextlib.contextmanager
def probing(lib: ModuleType, name: str, consequence: str) -> Iterator[None]:
    """A probe's body: an error reading a private name (gone, or of another shape) fails the
    probe with the same message as a wrong value does."""
    try:
        yield
    except (AttributeError, ImportError, TypeError, ValueError) as exc:
        pytest.fail(f"{changed(lib, name, consequence)} ({type(exc).__name__}: {exc})")


# --- probes: one per private name -------------------------------------------------------------


def test_probe_headers_list(lib: ModuleType) -> None:
    headers = lib.Headers([(b"Probe-Name", b"value")])
    assert getattr(headers, HEADER_ENTRIES, None) == [(b"Probe-Name", b"probe-name", b"value")], (
        changed(
            lib,
            "Headers._list (the (name, lower-case name, value) entries)",
            "request headers are copied through .raw and replayed headers are built the slow way",
        )
    )
    assert _headers_of(lib) is not header_bytes, changed(
        lib, "Headers._list", "replayed headers are no longer built from their entries"
    )


def test_probe_headers_encoding(lib: ModuleType) -> None:
    assert header_encoding(lib.Headers(), False) is None, changed(
        lib,
        "Headers._encoding (None until a charset is guessed)",
        "replayed headers could be read in a charset sakura-http did not choose",
    )
    with probing(lib, "Headers._list and Headers._encoding", "replayed headers cannot be built"):
        built = headers_from_entries(lib.Headers, [(b"X-Name", b"x-name", b"caf\xc3\xa9")])
    assert isinstance(built, lib.Headers)
    assert built.raw == [(b"X-Name", b"caf\xc3\xa9")], changed(
        lib, "Headers._list", "headers built from entries no longer hold them"
    )
    assert built["x-name"] == "café"
    assert list(built.multi_items()) == [("x-name", "café")]


def test_probe_url_uri_reference(lib: ModuleType) -> None:
    url = lib.URL("https://user:pw@API.Example.test:8443/a%20b?q=1#frag")
    with probing(lib, "URL._uri_reference", "every URL is parsed again to find its form"):
        parts = uri_reference(url)
        default_port = uri_reference(lib.URL("https://api.example.test:443/v1"))
    assert parts == (
        "https",
        "user:pw",
        "api.example.test",
        8443,
        "/a%20b",
        "q=1",
        "frag",
    ), changed(
        lib,
        "URL._uri_reference (scheme, userinfo, host, port, path, query, fragment)",
        "every URL is parsed again to find its canonical form",
    )
    assert default_port == ("https", "", "api.example.test", None, "/v1", None, None), changed(
        lib, "URL._uri_reference", "a default port or an absent query is no longer None"
    )


def test_probe_response_content(lib: ModuleType) -> None:
    consequence = "a replayed body is no longer taken whole by read(), but read chunk by chunk"
    usual = lib.Response(200, stream=lib.ByteStream(b"body"))
    assert not hasattr(usual, RESPONSE_CONTENT), changed(lib, "Response._content", consequence)
    usual.read()
    assert hasattr(usual, RESPONSE_CONTENT), changed(lib, "Response._content", consequence)
    taken = lib.Response(200, stream=lib.ByteStream(b"body"))
    with probing(lib, "Response._content", consequence):
        set_content(taken, b"body")
    assert taken.content == b"body", changed(lib, "Response._content", consequence)
    assert taken.num_bytes_downloaded == 4, changed(
        lib, "Response._num_bytes_downloaded", consequence
    )
    state = {name for name in vars(usual) if name.startswith("_")}
    assert state <= {"_content", "_num_bytes_downloaded", "_request", RESPONSE_DECODER}, changed(
        lib, f"the private state of a read Response ({sorted(state)})", consequence
    )


def test_probe_response_decoder(lib: ModuleType) -> None:
    response = lib.Response(200, stream=lib.ByteStream(b"body"))
    response.read()
    assert RESPONSE_DECODER in vars(response), changed(
        lib,
        "Response._decoder",
        "two reads of one body no longer compare equal, so read() is never taken whole",
    )


def test_probe_bound_streams(lib: ModuleType) -> None:
    consequence = (
        "a response read through a client no longer finds the replay stream, so read() is "
        "never taken whole"
    )
    sent = lib.ByteStream(b"body")

    def answer(request: Any) -> Any:
        return lib.Response(200, stream=sent)

    client = lib.Client(transport=lib.MockTransport(answer))
    with client, client.stream("GET", URL) as response:
        assert response.stream is not sent
        assert getattr(response.stream, WRAPPED_STREAM, None) is sent, changed(
            lib, "BoundSyncStream._stream", consequence
        )

    async def main() -> None:
        client = lib.AsyncClient(transport=lib.MockTransport(answer))
        async with client, client.stream("GET", URL) as response:
            assert getattr(response.stream, WRAPPED_STREAM, None) is sent, changed(
                lib, "BoundAsyncStream._stream", consequence
            )

    anyio.run(main)


def test_probe_httpx_decoders() -> None:
    # Only httpx's decoders are read: a body is stored decoded when httpx would decode it.
    import httpx

    consequence = "bodies are stored decoded differently from what httpx hands its caller"
    httpx_decoders.cache_clear()
    with probing(httpx, "httpx._decoders", consequence):
        decoders = httpx_decoders()
    assert {"identity", "gzip", "deflate"} <= decoders.encodings, changed(
        httpx, "httpx._decoders.SUPPORTED_DECODERS", consequence
    )
    brotli = importlib.util.find_spec("brotli") or importlib.util.find_spec("brotlicffi")
    assert ("br" in decoders.encodings) == (brotli is not None), changed(
        httpx, "httpx._decoders.SUPPORTED_DECODERS (br)", consequence
    )
    assert (decoders.brotli is not None) == (brotli is not None), changed(
        httpx, "httpx._decoders.brotli", consequence
    )
    zstandard = importlib.util.find_spec("zstandard")
    assert ("zstd" in decoders.encodings) == (zstandard is not None), changed(
        httpx, "httpx._decoders.SUPPORTED_DECODERS (zstd)", consequence
    )
    assert (decoders.zstandard is not None) == (zstandard is not None), changed(
        httpx, "httpx._decoders.zstandard", consequence
    )
    if decoders.brotli is not None:
        decoder = decoders.brotli_decoder()
        compressed = decoders.brotli.compress(b"hello brotli")
        assert decoder.decode(compressed) + decoder.flush() == b"hello brotli", changed(
            httpx, "httpx._decoders.BrotliDecoder", consequence
        )


def test_probe_client_transport_for_url(lib: ModuleType) -> None:
    # The hook patch_clients wraps (pytest_plugin/_patch.py), which also says so when it is gone.
    transport = lib.MockTransport(lambda request: lib.Response(200))
    for cls in (lib.Client, lib.AsyncClient):
        assert "_transport_for_url" in cls.__dict__, changed(
            lib, f"{cls.__name__}._transport_for_url", "patch_clients cannot be installed"
        )
        client = cls(transport=transport)
        assert client._transport_for_url(lib.URL(URL)) is transport, changed(
            lib, f"{cls.__name__}._transport_for_url", "patch_clients would route no request"
        )


# --- which library, and what it builds ------------------------------------------------------


def test_library_of_picks_the_request_s_own_library(lib: ModuleType) -> None:
    library = library_of(lib.Request("GET", URL))
    assert library.name == lib.__name__
    assert library.module is lib
    assert library_of(lib.Request("POST", URL)) is library


def test_library_of_refuses_a_request_of_another_library() -> None:
    class Request:
        pass

    with pytest.raises(TypeError, match=r"serves httpx and httpx2 requests, not .*Request"):
        library_of(Request())


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://api.example.test/v1", ("api.example.test", 80)),
        ("https://api.example.test/v1", ("api.example.test", 443)),
        ("https://api.example.test:8443/v1", ("api.example.test", 8443)),
        ("wss://api.example.test/socket", ("api.example.test", 443)),
    ],
)
def test_host_port_fills_in_the_scheme_s_port(
    lib: ModuleType, url: str, expected: tuple[str, int]
) -> None:
    request = lib.Request("GET", url)
    assert library_of(request).host_port(request) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.test/v1/items?b=2&a=1",
        "https://API.Example.TEST:443/v1/%7Eitems",
        "https://user:pw@api.example.test/v1#part",
        "https://[::1]:8443/v1?q=a%20b",
        "https://bücher.example.test/v1?key=secret-value",
    ],
)
def test_request_data_is_the_canonical_view_of_the_request(lib: ModuleType, url: str) -> None:
    request = lib.Request("POST", url, headers={"X-Trace": "1"}, content=b"{}")
    library = library_of(request)
    data = library.request_data(request, frozenset({"key"}))
    assert isinstance(data, RequestData)
    assert data.url == canonical_url(str(request.url), frozenset({"key"}))
    assert (data.method, data.body) == ("POST", b"{}")
    assert ("x-trace", "1") in data.headers
    assert (data.host, data.port) == library.host_port(request)


def test_replay_answers_with_the_library_s_response(lib: ModuleType) -> None:
    exchange = Exchange(
        "GET",
        URL,
        status=201,
        response_headers=(("content-type", "application/json"), ("x-id", "7")),
        response_body=b'{"ok": true}',
    )
    request = lib.Request("GET", URL)
    response = library_of(request).replay(exchange, request, 4, 0.0)
    assert isinstance(response, lib.Response)
    assert response.request is request
    assert response.status_code == 201
    assert response.headers["x-id"] == "7"
    assert response.read() == b'{"ok": true}'
    assert response.json() == {"ok": True}


def test_a_replayed_response_pickles_as_the_library_s_own(lib: ModuleType) -> None:
    exchange = Exchange("GET", URL, response_body=b"body")
    request = lib.Request("GET", URL)
    response = library_of(request).replay(exchange, request, 4, 0.0)
    response.read()
    copy = pickle.loads(pickle.dumps(response))
    assert type(copy) is lib.Response
    assert copy.content == b"body"
    assert "sakura_http" not in repr(pickle.dumps(response))


def test_fault_exchange_replays_the_httpx_error(drive: Driver, tmp_path: Any) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(
        b'{"schema_version":"1.0","kind":"cassette"}\n'
        b'{"method":"GET","url":"%s","headers":[["accept","*/*"]],"body":"",'
        b'"error":{"type":"ConnectTimeout","message":"timed out"}}\n' % URL.encode()
    )
    with pytest.raises(drive.lib.ConnectTimeout, match="timed out") as caught:
        drive.send(drive.transport(path), "GET", URL)
    assert caught.value.request.url == URL


@pytest.mark.parametrize("name", ["NoSuchError", "HTTPStatusError", "Response"])
def test_a_fault_the_library_cannot_raise_stays_a_transport_error(
    lib: ModuleType, name: str
) -> None:
    # A hand-written cassette may name any class: the code under test still sees a network
    # failure, and the message says what was recorded.
    request = lib.Request("GET", URL)
    error = library_of(request).fault(FaultInfo(name, "boom"), request)
    assert type(error) is lib.TransportError
    assert str(error) == f"boom (recorded as {name}, which {lib.__name__} does not have)"
    assert error.request is request


def test_is_transport_error_is_the_library_s_own(lib: ModuleType) -> None:
    library = library_of(lib.Request("GET", URL))
    assert library.is_transport_error(lib.ConnectError("refused"))
    assert not library.is_transport_error(ValueError("refused"))


# --- DefaultOuter ------------------------------------------------------------------------------


def test_default_outer_reaches_the_server_with_the_request_s_library(
    lib: ModuleType, echo_server: LocalServer
) -> None:
    # What a RecordingTransport forwards to when it is given no outer transport.
    outer = DefaultOuter()
    assert repr(outer) == "<sakura_http DefaultOuter>"
    response = outer.handle_request(lib.Request("GET", f"{echo_server.url}/v1/ping"))
    assert isinstance(response, lib.Response)
    assert response.status_code == 200
    assert orjson.loads(response.read())["path"] == "/v1/ping"
    response.close()
    outer.close()
    outer.close()  # closing twice is harmless


@pytest.mark.anyio
async def test_default_outer_async(lib: ModuleType, echo_server: LocalServer) -> None:
    outer = DefaultOuter()
    response = await outer.handle_async_request(lib.Request("GET", f"{echo_server.url}/v1/ping"))
    assert isinstance(response, lib.Response)
    assert orjson.loads(await response.aread())["path"] == "/v1/ping"
    await response.aclose()
    await outer.aclose()
