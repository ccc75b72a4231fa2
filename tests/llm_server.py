"""A fake LLM provider on 127.0.0.1: enough of the Anthropic Messages API and the OpenAI Chat
Completions API to record the official SDKs against (stdlib only, like tests/servers.py).

``POST /v1/messages`` (anthropic) and ``POST /v1/chat/completions`` (openai) answer by what the
request asks, so the same conversation always gets the same reply:

* model ``fake-429`` -> a 429 rate-limit error; model ``fake-529`` -> a 529 overloaded error;
* a structured-output request (anthropic ``output_config.format``, openai ``response_format``)
  -> `STRUCTURED` as JSON text;
* tools given and the last message is not a tool result -> a call of the first tool with
  ``{"city": "Kyoto"}`` (the id counts calls, so a loop gets distinct ids);
* the last message is a tool result -> ``"Tool said: <result>."``;
* otherwise -> ``"Hello, <last user text>!"``.

``"stream": true`` answers with Server-Sent Events, each event written as its own HTTP chunk
(text in `TEXT_PIECE`-sized deltas).  Every request is kept in `FakeProvider.requests` with its
headers, so tests can check what the SDK sent.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.servers import _QuietServer, _serving

STRUCTURED = {"name": "Somei Yoshino", "petals": 5}
TEXT_PIECE = 6  # characters per streamed text delta


@dataclass
class FakeProvider:
    """A running fake provider: `url` is its base URL (append ``/v1`` for openai)."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def next_id(self) -> int:
        return next(self._ids)


def _last(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return messages[-1] if messages else {"role": "user", "content": ""}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(str(part.get("text", part.get("content", ""))) for part in content)


def _pieces(text: str) -> list[str]:
    return [text[i : i + TEXT_PIECE] for i in range(0, len(text), TEXT_PIECE)] or [""]


# --- what to answer, whatever the API --------------------------------------------------------


@dataclass(frozen=True)
class _Reply:
    text: str | None = None
    tool: tuple[str, str, dict[str, Any]] | None = None  # (id, name, input)


def _anthropic_reply(body: dict[str, Any], provider: FakeProvider) -> _Reply:
    messages = body.get("messages", [])
    last = _last(messages)
    content = last.get("content")
    if isinstance(content, list) and any(p.get("type") == "tool_result" for p in content):
        result = next(p for p in content if p.get("type") == "tool_result")
        return _Reply(text=f"Tool said: {_text_of(result.get('content', ''))}.")
    if (body.get("output_config") or {}).get("format"):
        return _Reply(text=json.dumps(STRUCTURED))
    tools = body.get("tools") or []
    if tools:
        return _Reply(tool=(f"toolu_{provider.next_id():04d}", tools[0]["name"], {"city": "Kyoto"}))
    return _Reply(text=f"Hello, {_text_of(content)}!")


def _openai_reply(body: dict[str, Any], provider: FakeProvider) -> _Reply:
    last = _last(body.get("messages", []))
    if last.get("role") == "tool":
        return _Reply(text=f"Tool said: {_text_of(last.get('content', ''))}.")
    if body.get("response_format", {}).get("type") == "json_schema":
        return _Reply(text=json.dumps(STRUCTURED))
    tools = body.get("tools") or []
    if tools:
        name = tools[0]["function"]["name"]
        return _Reply(tool=(f"call_{provider.next_id():04d}", name, {"city": "Kyoto"}))
    return _Reply(text=f"Hello, {_text_of(last.get('content', ''))}!")


# --- anthropic wire format -----------------------------------------------------------------


def _anthropic_message(body: dict[str, Any], reply: _Reply, n: int) -> dict[str, Any]:
    if reply.tool is not None:
        tool_id, name, arguments = reply.tool
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}
        ]
    else:
        content = [{"type": "text", "text": reply.text}]
    return {
        "id": f"msg_fake{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": content,
        "stop_reason": "tool_use" if reply.tool is not None else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 7},
    }


def _anthropic_events(body: dict[str, Any], reply: _Reply, n: int) -> Iterator[bytes]:
    message = _anthropic_message(body, reply, n)
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": 11, "output_tokens": 1}

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    yield event("message_start", {"message": start})
    if reply.tool is not None:
        tool_id, name, arguments = reply.tool
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in _pieces(json.dumps(arguments))
        ]
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(reply.text or "")]
    yield event("content_block_start", {"index": 0, "content_block": block})
    for delta in deltas:
        yield event("content_block_delta", {"index": 0, "delta": delta})
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
    )
    yield event("message_stop", {})


# --- openai wire format --------------------------------------------------------------------


def _openai_completion(body: dict[str, Any], reply: _Reply, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
    if reply.tool is not None:
        tool_id, name, arguments = reply.tool
        message["tool_calls"] = [
            {
                "id": tool_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    return {
        "id": f"chatcmpl-fake{n:04d}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool is not None else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _openai_events(body: dict[str, Any], reply: _Reply, n: int) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {
            "id": f"chatcmpl-fake{n:04d}",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": body.get("model"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(data)}\n\n".encode()

    yield chunk({"role": "assistant", "content": ""})
    if reply.tool is not None:
        tool_id, name, arguments = reply.tool
        head = {"index": 0, "id": tool_id, "type": "function", "function": {"name": name}}
        yield chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        for piece in _pieces(json.dumps(arguments)):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls")
    else:
        for piece in _pieces(reply.text or ""):
            yield chunk({"content": piece})
        yield chunk({}, "stop")
    yield b"data: [DONE]\n\n"


# --- the server ----------------------------------------------------------------------------


_ERRORS = {
    "fake-429": (429, "rate_limit_error", "Rate limited by the fake provider."),
    "fake-529": (529, "overloaded_error", "The fake provider is overloaded."),
}


class _Handler(BaseHTTPRequestHandler):
    server: _ProviderServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        provider = self.server.state
        provider.requests.append(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )
        anthropic = self.path == "/v1/messages"
        if not anthropic and self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        error = _ERRORS.get(body.get("model", ""))
        if error is not None:
            status, kind, message = error
            if anthropic:
                self._json(status, {"type": "error", "error": {"type": kind, "message": message}})
            else:
                self._json(status, {"error": {"message": message, "type": kind, "code": kind}})
            return
        n = len(provider.requests)
        if anthropic:
            reply = _anthropic_reply(body, provider)
            if body.get("stream"):
                self._stream(_anthropic_events(body, reply, n))
            else:
                self._json(200, _anthropic_message(body, reply, n))
        else:
            reply = _openai_reply(body, provider)
            if body.get("stream"):
                self._stream(_openai_events(body, reply, n))
            else:
                self._json(200, _openai_completion(body, reply, n))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake{len(self.server.state.requests):04d}")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in events:  # one HTTP chunk per event
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ProviderServer(_QuietServer):
    daemon_threads = True
    state: FakeProvider


@contextlib.contextmanager
def start_fake_provider() -> Iterator[FakeProvider]:
    """Serve the fake provider on 127.0.0.1 (a free port) until the block ends."""
    server = _ProviderServer(("127.0.0.1", 0), _Handler)
    server.state = FakeProvider(url=f"http://127.0.0.1:{server.server_address[1]}")
    with _serving(server):
        yield server.state
