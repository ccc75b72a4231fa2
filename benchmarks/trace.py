"""Trace one recorded request through `RecordingTransport`: where control goes in sakura-http.

    python benchmarks/trace.py           # the table, by hand
    python benchmarks/trace.py --json    # the same figures as JSON (tests/test_steps.py reads them)

The request carries one secret header (declared in ``secret_headers``) that the response echoes,
and the cassette's `Rules` hold one scrub, so every stage of the write pipeline has work to do.
A first request of the same shape runs untraced (imports, caches); the second is traced with
`sys.setprofile`, counting calls of Python functions in sakura_http modules, and the switches of
control between modules (a call from a frame of another module; "entered" counts them per
module).  Two windows are reported: the whole request (`handle_request`), and finishing the
exchange (`ResponseRecorder.exchange_to_write`: the capture through the write pipeline), with
the calls made with no `_pipeline` frame on the stack ("beside the pipeline").  Issue 29's
review counted 9 modules, 380 calls and 62 switches, control entering `_policy` 6 times and
`_rules` 3 times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from sakura_http import RecordingTransport, Rules, Scrub

SECRET = "Bearer sk-trace-0123456789abcdef"
PIPELINE = "sakura_http._pipeline"


@dataclass
class Window:
    """What the profiler saw while one call of `name` ran."""

    name: str
    calls: Counter[str] = field(default_factory=Counter)  # module -> calls of its functions
    entered: Counter[str] = field(default_factory=Counter)  # module -> calls from another one
    #: function (module:qualified name) -> its calls with no `_pipeline` frame on the stack
    beside_pipeline: Counter[str] = field(default_factory=Counter)

    def figures(self) -> dict[str, Any]:
        return {
            "window": self.name,
            "modules": len(self.calls),
            "calls": sum(self.calls.values()),
            "switches": sum(self.entered.values()),
            "calls_by_module": dict(self.calls.most_common()),
            "entered": dict(self.entered.most_common()),
            "beside_pipeline": dict(self.beside_pipeline.most_common()),
        }


def _module(frame: FrameType | None) -> str | None:
    """The sakura_http module `frame` runs in (None: not sakura-http's)."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return str(name) if name == "sakura_http" or name.startswith("sakura_http.") else None


def _under_pipeline(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_globals.get("__name__") == PIPELINE:
            return True
        frame = frame.f_back
    return False


class Tracer:
    """A `sys.setprofile` hook filling a `Window` for each call of the functions watched.

    Each call of a Python function of a sakura_http module counts; a call from a frame of
    another module (sakura-http's or not) is a switch into the callee's module."""

    def __init__(self, watched: dict[str, str]) -> None:
        self.watched = watched  # qualified name -> window name
        self.windows: list[Window] = []
        self._open: list[tuple[FrameType, Window]] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            if self._open and self._open[-1][0] is frame:
                self._open.pop()
            return
        module = _module(frame)
        if event != "call" or module is None:
            return  # (C calls are not sakura-http's)
        name = self.watched.get(frame.f_code.co_qualname)
        if name is not None:
            window = Window(name)
            self.windows.append(window)
            self._open.append((frame, window))
        switch = _module(frame.f_back) != module
        beside = not _under_pipeline(frame)
        for _, window in self._open:
            window.calls[module] += 1
            if switch:
                window.entered[module] += 1
            if beside:
                window.beside_pipeline[f"{module}:{frame.f_code.co_qualname}"] += 1


def trace() -> list[dict[str, Any]]:
    """Record two requests; the figures of the second, traced."""

    def answer(request: httpx.Request) -> httpx.Response:
        echoed = request.headers["authorization"]
        body = json.dumps({"seen": echoed, "session": {"token": "tok-" + request.url.path}})
        return httpx.Response(200, headers={"content-type": "application/json"}, text=body)

    with tempfile.TemporaryDirectory() as folder:
        transport = RecordingTransport(
            Path(folder) / "trace.jsonl",
            outer=httpx.MockTransport(answer),
            mode="new_episodes",
            secret_headers=["authorization"],
            rules=Rules(scrub=[Scrub.json("session.token")]),
        )
        with transport, httpx.Client(transport=transport) as client:
            client.get("http://api.test/warm", headers={"authorization": SECRET})
            tracer = Tracer(
                {
                    "RecordingTransport.handle_request": "one recorded request",
                    "ResponseRecorder.exchange_to_write": "finishing the exchange",
                }
            )
            sys.setprofile(tracer)
            try:
                client.get("http://api.test/traced", headers={"authorization": SECRET})
            finally:
                sys.setprofile(None)
    return [window.figures() for window in tracer.windows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    figures = trace()
    if parser.parse_args().json:
        print(json.dumps(figures, indent=2))
        return
    for window in figures:
        print(
            f"{window['window']}: {window['modules']} modules, {window['calls']} calls, "
            f"{window['switches']} switches between modules"
        )
        print("  calls:   " + ", ".join(f"{m} {n}" for m, n in window["calls_by_module"].items()))
        print("  entered: " + ", ".join(f"{m} {n}" for m, n in window["entered"].items()))
        beside: Counter[str] = Counter()
        for name, count in window["beside_pipeline"].items():
            beside[name.partition(":")[0]] += count
        print("  beside the pipeline: " + ", ".join(f"{m} {n}" for m, n in beside.most_common()))


if __name__ == "__main__":
    main()
