"""sakura-http against its peers, every measure of the performance targets in one run.

    python benchmarks/run.py             # the full run (several minutes), by hand
    python benchmarks/run.py --quick     # small sizes, one repetition: seconds (CI runs it)
    python benchmarks/run.py --chart docs/performance.svg --json results.json

Each measure runs in a fresh process (``benchmarks/measures.py``), is repeated, and reports the
median.  Every figure a target uses is a ratio against a floor measured in the same run (a bare
``httpx.MockTransport``, the bare client, reading the file with ``orjson``), so the targets hold
or fail the same way on a fast or a slow machine.  The table marks each target met or not; the
chart (matplotlib, the ``bench`` dependency group) draws the ratios per tool.  Peers that do not
import are skipped with a note.  Only servers on 127.0.0.1 are used.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MEASURES = HERE / "measures.py"
PEERS = ("cassetter", "vcrpy")
PROXY_PEERS = ("sakura-http", "mitmdump")  # measure 10
MIB = 1024 * 1024


@dataclass(frozen=True)
class Sizes:
    repeat: int
    replay_count: int  # exchanges in the replay cassette, and requests replayed
    record_count: int
    size_steps: tuple[int, ...]
    load_count: int
    big_body: int
    first_chunk_count: int
    diff_bytes: int  # the larger pair of measure 8; the smaller is a quarter of it
    proxy_seconds: float  # measure 10: how long the clients load a proxy for one figure
    proxy_body: int  # measure 10: the big replayed body


FULL = Sizes(5, 1_000, 1_000, (10, 1_000, 10_000), 10_000, 16 * MIB, 20, 4_000_000, 4.0, 5 * MIB)
QUICK = Sizes(1, 50, 30, (10, 200), 200, 1 * MIB, 3, 400_000, 0.3, 1 * MIB)


@dataclass
class Row:
    """One line of the table: a figure per tool, the target, and whether it is met."""

    measure: str
    cells: dict[str, str] = field(default_factory=dict)  # tool -> text
    ratios: dict[str, float] = field(default_factory=dict)  # tool -> ratio to the floor
    target: str = ""
    met: bool | None = None  # None: no target, or not measured


@dataclass
class Run:
    sizes: Sizes
    workdir: Path
    base: str = ""
    notes: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    skipped: set[str] = field(default_factory=set)
    machine: str = field(default_factory=lambda: _machine())

    def environment(self) -> dict[str, str]:
        """The measuring processes' environment: bytecode is cached, as for an installed package.

        `pip install` compiles a package's modules; an editable install or a shell with
        PYTHONDONTWRITEBYTECODE set would compile them again in every process and count that
        as import time.  The cache goes under the run's work directory, not the source tree.
        """
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(self.workdir / "pycache")
        return env

    def _once(self, kind: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        """Run `kind` once in a fresh process; None (and a note) when its tool is unavailable."""
        out = subprocess.run(
            [sys.executable, str(MEASURES), json.dumps({"kind": kind, **spec})],
            capture_output=True,
            text=True,
            cwd=HERE.parent,
            env=self.environment(),
            timeout=900,
        )
        if out.returncode != 0:
            raise RuntimeError(f"measure {kind} {spec} failed:\n{out.stderr}")
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        if "failed" in result:  # a peer that runs here but cannot do this measure
            if result["failed"] not in self.notes:
                self.notes.append(result["failed"].splitlines()[0])
            return None
        if "unavailable" in result:
            tool = spec.get("tool", kind)
            if tool not in self.skipped:
                self.skipped.add(tool)
                self.notes.append(f"{tool} skipped: {result['unavailable']}")
            return None
        return result

    def measure_each(
        self, kind: str, specs: dict[str, dict[str, Any]], repeat: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Run `kind` for each spec, `repeat` rounds of one run each, interleaved so that a
        change in the machine's load touches every spec alike; the median of every number."""
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in specs}
        for _ in range(repeat or self.sizes.repeat):
            for name, spec in specs.items():
                if name in runs:
                    result = self._once(kind, spec)
                    if result is None:
                        del runs[name]
                    else:
                        runs[name].append(result)
        medians = {}
        for name, results in runs.items():
            merged = dict(results[0])
            for key, value in results[0].items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    merged[key] = statistics.median(r[key] for r in results)
            medians[name] = merged
        return medians

    def measure(self, kind: str, repeat: int | None = None, **spec: Any) -> dict[str, Any] | None:
        """Run `kind` `repeat` times, each in a fresh process; the median of every number."""
        return self.measure_each(kind, {kind: spec}, repeat).get(kind)

    def tools(self) -> list[str]:
        return ["sakura-http", *(p for p in PEERS if p not in self.skipped)]

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"  {row.measure}: " + ", ".join(f"{k} {v}" for k, v in row.cells.items()))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _ext(tool: str) -> str:
    return {"sakura-http": ".jsonl", "vcrpy": ".yaml", "cassetter": ".yaml"}.get(tool, ".jsonl")


# --- the measures ---------------------------------------------------------------------------


def measure_recording(run: Run) -> dict[str, str]:
    """4. Record from the local server; returns each tool's last recording (the replay source)."""
    n = run.sizes.record_count
    specs = {
        tool: {
            "tool": tool,
            "path": str(run.workdir / f"recorded-{tool}{_ext(tool)}"),
            "base": run.base,
            "count": n,
        }
        for tool in ["floor", "sakura-http", *PEERS]
    }
    results = run.measure_each("record", specs)
    recorded = {tool: specs[tool]["path"] for tool in results}
    floor = results["floor"]["total_s"]
    total = Row(f"4. Record {n:,} GETs from a local server, total")
    drift = Row("4. Recording: last 100 vs first 100 per exchange", target="<= 1.2x")
    total.cells["floor"] = f"{floor:.2f} s"
    for tool, result in results.items():
        if tool == "floor":
            continue
        ratio = result["total_s"] / floor
        total.ratios[tool] = ratio
        total.cells[tool] = f"{ratio:.2f}x ({result['total_s']:.2f} s)"
        late = result["last_s"] / result["first_s"]
        drift.cells[tool] = f"{late:.2f}x"
    late_sakura = results["sakura-http"]["last_s"] / results["sakura-http"]["first_s"]
    drift.met = late_sakura <= 1.2
    run.add(total)
    # The target is judged in one process, the bare client and sakura-http alternating
    # (`record_alternating`), as replay's is: the totals above carry process-to-process noise.
    for asynchronous in (False, True):
        _alternating(
            run,
            "4. The same, sakura-http and the bare client alternating in one process"
            + (", async (asyncio)" if asynchronous else ""),
            1.15,
            "record_alternating",
            path=str(run.workdir / "recorded-alternating.jsonl"),
            base=run.base,
            count=n,
            asynchronous=asynchronous,
        )
    run.add(drift)
    return recorded


def _scaled(run: Run, recorded: dict[str, str], n: int, name: str) -> dict[str, str]:
    """Each tool's recorded cassette grown to `n` exchanges, in its own format: tool -> path."""
    paths = {}
    for tool in run.tools():
        dst = str(run.workdir / f"{name}-{n}-{tool}{_ext(tool)}")
        run.measure(
            "scale", repeat=1, tool=tool, src=recorded[tool], dst=dst, count=n, base=run.base
        )
        paths[tool] = dst
    return paths


def measure_replay(run: Run, recorded: dict[str, str]) -> dict[str, str]:
    """1. Replay overhead per request against the bare MockTransport, sync and async; returns
    the replay cassettes (tool -> path)."""
    n = run.sizes.replay_count
    cassettes = _scaled(run, recorded, n, "replay")
    cassettes["floor"] = cassettes["sakura-http"]
    for asynchronous in (False, True):
        flavour = "async (asyncio)" if asynchronous else "sync"
        row = Row(f"1. Replay {n:,} GETs from a {n:,}-exchange cassette, per request, {flavour}")
        specs = {
            tool: {
                "tool": tool,
                "path": cassettes[tool],
                "base": run.base,
                "count": n,
                "asynchronous": asynchronous,
            }
            for tool in ["floor", *run.tools()]
        }
        # A process's speed varies by 10-20% from one process to the next on a shared VM (where
        # it lands, what runs beside it), more than the overhead measured here: the tools that
        # replay in a second get three times the processes; vcrpy, at tens of seconds a run,
        # keeps the usual number, which is plenty at its ratio.
        fast = {tool: spec for tool, spec in specs.items() if tool != "vcrpy"}
        results = run.measure_each("replay", fast, repeat=3 * run.sizes.repeat)
        if "vcrpy" in specs:
            results.update(run.measure_each("replay", {"vcrpy": specs["vcrpy"]}))
        times = {tool: result["per_request_s"] for tool, result in results.items()}
        row.cells["floor"] = _us(times["floor"])
        for tool, seconds in times.items():
            if tool != "floor":
                row.ratios[tool] = seconds / times["floor"]
                row.cells[tool] = f"{row.ratios[tool]:.2f}x ({_us(seconds)})"
        run.add(row)
        # The target is judged in one process, where the floor runs beside sakura-http
        # (`replay_alternating`): the figures above carry the process-to-process noise.
        _alternating(
            run,
            f"1. The same, sakura-http and the floor alternating in one process, {flavour}",
            1.10,
            "replay_alternating",
            path=cassettes["sakura-http"],
            base=run.base,
            count=n,
            asynchronous=asynchronous,
        )
    # Two rows with no target, async, each varying one thing:
    # - the headers an LLM SDK sends, an idempotency key new every time among them, so that no
    #   two requests send the same header list and nothing is remembered from one request to
    #   the next but what each header name is (`_credentials.is_credential_header`);
    # - a floor whose response the client reads: the usual floor's is read before the client
    #   sees it, which an async client then skips reading; a replayed (or live) response is
    #   read by the client, through httpx's async generators.  Against a floor the client
    #   reads the same way, what is left is sakura-http's own work.
    for measure, variant in (
        (
            "1. The same, each request carrying an LLM SDK's headers (`x-stainless-*` and an "
            "idempotency key new every time), async (asyncio)",
            {"sdk": True},
        ),
        (
            "1. The same against a MockTransport whose body the client reads, as it reads a "
            "live one, async (asyncio)",
            {"streamed_floor": True},
        ),
    ):
        _alternating(
            run,
            measure,
            None,
            "replay_alternating",
            path=cassettes["sakura-http"],
            base=run.base,
            count=n,
            asynchronous=True,
            **variant,
        )
    return cassettes


def measure_clients(run: Run, cassettes: dict[str, str]) -> None:
    """9. Replay through the requests and aiohttp front ends against each client's mock library
    serving the same response (``responses``, ``aioresponses``), alternating in one process."""
    n = run.sizes.replay_count
    for client, front_end, peer in (
        ("requests", "RecordingAdapter", "responses"),
        ("aiohttp", "RecordingMiddleware", "aioresponses"),
    ):
        spec = {"client": client, "path": cassettes["sakura-http"], "base": run.base, "count": n}
        result = run.measure("client_alternating", tool=peer, **spec)
        row = Row(
            f"9. Replay {n:,} GETs through {client} ({front_end}) vs {peer} serving the same "
            "response, alternating in one process",
            target="<= 1.00x",
        )
        if result is None:  # the peer does not import: noted by `measure`
            row.cells["floor"] = f"{peer} not installed"
        else:
            row.ratios["sakura-http"] = result["ratio"]
            row.cells["sakura-http"] = f"{result['ratio']:.2f}x"
            row.cells["floor"] = f"{peer}, {int(result['blocks']):,} block pairs"
            row.met = result["ratio"] <= 1.0
        run.add(row)


def _alternating(run: Run, measure: str, limit: float | None, kind: str, **spec: Any) -> None:
    """The row of a measure taken in one process, sakura-http and its floor taking turns; a
    target when `limit` is given."""
    result = run.measure(kind, **spec)
    assert result is not None
    row = Row(measure, target="" if limit is None else f"<= {limit:.2f}x")
    row.ratios["sakura-http"] = result["ratio"]
    row.cells["sakura-http"] = f"{result['ratio']:.2f}x"
    row.cells["floor"] = f"{int(result['blocks']):,} block pairs"
    row.met = None if limit is None else result["ratio"] <= limit
    run.add(row)


def measure_size(run: Run, recorded: dict[str, str]) -> None:
    """2. Per-request replay time near the end of small and large cassettes."""
    steps = run.sizes.size_steps
    specs = {}
    for size in steps:
        dst = str(run.workdir / f"size-{size}.jsonl")
        run.measure(
            "scale", repeat=1, tool="sakura-http", src=recorded["sakura-http"], dst=dst,
            count=size, base=run.base,
        )  # fmt: skip
        specs[str(size)] = {"path": dst, "url": f"{run.base}/items/{size - 1}", "count": 200}
    results = run.measure_each("replay_one", specs)
    times = {size: results[str(size)]["per_request_s"] for size in steps}
    row = Row(f"2. Replay per request at {steps[-1]:,} exchanges vs {steps[0]:,}")
    ratio = times[steps[-1]] / times[steps[0]]
    row.ratios["sakura-http"] = ratio
    row.cells["sakura-http"] = f"{ratio:.2f}x ({' / '.join(_us(times[s]) for s in steps)})"
    row.cells["floor"] = f"{steps[0]:,} exchanges"
    run.add(row)
    # The target is judged in one process, the two cassettes taking turns (`size_alternating`):
    # the figures above carry the process-to-process noise, as measure 1's do.
    small, large = steps[0], steps[-1]
    _alternating(
        run,
        f"2. The same, {large:,} and {small:,} exchanges alternating in one process",
        1.10,
        "size_alternating",
        small=specs[str(small)]["path"],
        large=specs[str(large)]["path"],
        small_url=specs[str(small)]["url"],
        large_url=specs[str(large)]["url"],
    )


def measure_load(run: Run, recorded: dict[str, str]) -> None:
    """3. Open a large cassette, and a one-exchange cassette with a large body."""
    n = run.sizes.load_count
    paths = _scaled(run, recorded, n, "load")
    if "vcrpy" in paths:  # vcrpy's JSON serializer too
        dst = str(run.workdir / f"load-{n}-vcrpy.json")
        src = str(run.workdir / "recorded-vcrpy-json.json")
        run.measure("record", repeat=1, tool="vcrpy", path=src, base=run.base, count=2)
        run.measure("scale", repeat=1, tool="vcrpy", src=src, dst=dst, count=n, base=run.base)
        paths["vcrpy (json)"] = dst
    size_mb = Path(paths["sakura-http"]).stat().st_size / 1e6
    row = Row(f"3. Open a {n:,}-exchange cassette ({size_mb:.1f} MB)", target="<= 1.5x")
    specs = {"floor": {"tool": "floor", "path": paths["sakura-http"]}}
    specs.update({tool: {"tool": tool.split(" ")[0], "path": path} for tool, path in paths.items()})
    results = run.measure_each("load", specs)
    floor = results.pop("floor")["load_s"]
    row.cells["floor"] = _ms(floor)
    for tool, result in results.items():
        row.ratios[tool] = result["load_s"] / floor
        row.cells[tool] = f"{row.ratios[tool]:.2f}x ({_ms(result['load_s'])})"
    row.met = row.ratios["sakura-http"] <= 1.5
    run.add(row)
    first = run.measure("first_request", path=paths["sakura-http"], url=f"{run.base}/items/{n - 1}")
    assert first is not None
    row = Row("3. First replayed request after opening it (builds the match index)")
    row.ratios["sakura-http"] = first["first_s"] / floor
    row.cells["sakura-http"] = f"{row.ratios['sakura-http']:.2f}x ({_ms(first['first_s'])})"
    row.cells["floor"] = "the load floor"
    run.add(row)

    big = str(run.workdir / "big.jsonl")
    body = run.sizes.big_body
    run.measure("big_cassette", repeat=1, dst=big, url=f"{run.base}/big", size=body, chunk=65536)
    row = Row(f"3. Open a one-exchange cassette with a {body // MIB} MiB body", target="<= 1.5x")
    specs = {"floor": {"tool": "floor", "path": big}, "mine": {"tool": "sakura-http", "path": big}}
    results = run.measure_each("load", specs)
    floor, mine = results["floor"]["load_s"], results["mine"]["load_s"]
    row.cells["floor"] = _ms(floor)
    row.ratios["sakura-http"] = mine / floor
    row.cells["sakura-http"] = f"{mine / floor:.2f}x ({_ms(mine)})"
    row.met = mine / floor <= 1.5
    run.add(row)


def measure_streaming(run: Run) -> None:
    """5. Streamed replay of a large body; time to the first chunk, replayed and recorded."""
    body = run.sizes.big_body
    big = str(run.workdir / "big.jsonl")
    result = run.measure("stream_big", path=big, url=f"{run.base}/big")
    assert result is not None
    speed = result["throughput_bps"] / 1e9
    row = Row(f"5. Replay a {body // MIB} MiB body in chunks, throughput", target=">= 2 GB/s")
    row.cells["sakura-http"] = f"{speed:.1f} GB/s"
    row.met = speed >= 2
    run.add(row)
    load_x = result["load_peak_bytes"] / body
    replay_x = result["replay_peak_bytes"] / body
    row = Row(
        f"5. Peak RSS over the baseline, opening / replaying the {body // MIB} MiB body",
        target="<= 1.5x body",
    )
    row.cells["sakura-http"] = f"{load_x:.2f}x / {replay_x:.2f}x of the body"
    row.met = max(load_x, replay_x) <= 1.5
    if not result["peak_reset"]:
        run.notes.append("peak RSS could not be reset between opening and replaying")
    run.add(row)

    sse = str(run.workdir / "sse.jsonl")
    url = f"{run.base}/sse?n=5&gap_ms=100"
    run.measure("sse_cassette", repeat=1, dst=sse, url=url, events=5)
    _first_chunk(
        run, "5. Time to first chunk of a recorded SSE stream (vs MockTransport streaming)",
        sse, url, ("floor-replay", "sakura-http-replay"),
    )  # fmt: skip
    _first_chunk(
        run, "5. Time to first chunk while recording, stream_through=True (vs the live server)",
        str(run.workdir / "sse-recorded.jsonl"), url, ("floor-live", "sakura-http-stream-through"),
    )  # fmt: skip


def _first_chunk(run: Run, measure: str, path: str, url: str, tools: tuple[str, str]) -> None:
    count = run.sizes.first_chunk_count
    specs = {tool: {"tool": tool, "path": path, "url": url, "count": count} for tool in tools}
    results = run.measure_each("first_chunk", specs)
    floor, mine = (results[tool]["first_chunk_s"] for tool in tools)
    row = Row(measure)
    row.cells["floor"] = _us(floor)
    row.ratios["sakura-http"] = mine / floor
    row.cells["sakura-http"] = f"{mine / floor:.2f}x ({_us(mine)})"
    run.add(row)


def measure_import(run: Run) -> None:
    """6. Import time on top of ``import httpx, pytest``."""
    row = Row(
        "6. Import (sakura-http: package + pytest plugin) after `import httpx, pytest`",
        target="<= 30 ms, no optional deps",
    )
    specs = {t: {"tool": t} for t in ["sakura-http", *PEERS]}
    run.measure_each("import_time", specs, repeat=1)  # untimed: fills the bytecode cache
    results = run.measure_each("import_time", specs)
    for tool, result in results.items():
        text = _ms(result["import_s"])
        if result["heavy_modules"]:
            text += f" (imports {', '.join(result['heavy_modules'])})"
        row.cells[tool] = text
        if tool == "sakura-http":
            row.met = result["import_s"] <= 0.030 and not result["heavy_modules"]
    run.add(row)


def measure_proxy(run: Run) -> None:
    """7. Replay through the recording proxy vs a minimal anyio + h11 server, 20 clients."""
    if importlib.util.find_spec("sakura_http.proxy") is None:
        run.notes.append(
            "7. Proxy replay vs a minimal anyio + h11 server: skipped, the proxy has not landed"
        )
        return
    n = run.sizes.replay_count
    path = str(run.workdir / f"replay-{n}-sakura-http.jsonl")  # measure 1's cassette
    spec = {"path": path, "base": run.base, "count": n, "clients": 20}
    results = run.measure_each(
        "proxy_replay", {tool: {"tool": tool, **spec} for tool in ("floor", "sakura-http")}
    )
    if "sakura-http" not in results:
        return
    floor, mine = results["floor"]["per_request_s"], results["sakura-http"]["per_request_s"]
    row = Row(
        f"7. Replay {n:,} GETs through the proxy, 20 keep-alive clients, per request",
        target="<= 1.5x",
    )
    row.cells["floor"] = f"{_us(floor)} (anyio + h11 from memory)"
    row.ratios["sakura-http"] = mine / floor
    row.cells["sakura-http"] = f"{mine / floor:.2f}x ({_us(mine)})"
    row.met = mine / floor <= 1.5
    run.add(row)


def measure_proxy_peers(run: Run) -> None:
    """10. The proxy against mitmdump, both forward proxies on 127.0.0.1: requests per second
    and the proxy's CPU time per request, 1 and 32 keep-alive clients (`benchmarks/proxies.py`).
    Each proxy replays what was recorded through it beforehand, or records every request."""
    if importlib.util.find_spec("sakura_http.proxy") is None:
        run.notes.append("10. Proxy vs mitmdump: skipped, the proxy has not landed")
        return
    work = str(run.workdir)
    certs = run.measure("tls_cert", repeat=1, folder=work)
    tls = None if certs is None else certs["cert"]
    upstream_ca = None if certs is None else certs["ca"]
    with contextlib.ExitStack() as servers:
        https = None if tls is None else servers.enter_context(local_server(tls=tls))
        small, big = f"{run.base}/items/1", f"{run.base}/bytes/{run.sizes.proxy_body}"
        urls = [small, big] + ([f"{https}/items/1"] if https else [])
        stores = {}
        for tool in PROXY_PEERS:
            stores[tool] = str(
                run.workdir / f"proxy-{tool}.{'jsonl' if tool == 'sakura-http' else 'flows'}"
            )
            run.measure(
                "proxy_record", repeat=1, tool=tool, store=stores[tool], urls=urls, workdir=work,
                upstream_ca=upstream_ca,
            )  # fmt: skip
        cases = [
            ("Replay a small JSON body", small, False, 3.0),
            (f"Replay a {run.sizes.proxy_body // MIB} MiB body", big, False, 1.0),
        ]
        if https:
            cases += [
                ("Replay a small JSON body over https (CONNECT, each proxy's CA)",
                 f"{https}/items/1", False, 3.0),
                ("Record every request, a small JSON body over https from a local upstream "
                 "(--mode all; mitmdump -w)", f"{https}/items/1", True, 3.0),
            ]  # fmt: skip
        else:
            run.notes.append("10. the https rows need trustme (the dev group): not measured")
        for name, url, record, target in cases:
            for clients in (1, 32):
                specs = {}
                for tool in PROXY_PEERS:
                    if tool in run.skipped:
                        continue
                    store = str(run.workdir / f"recording-{tool}") if record else stores[tool]
                    specs[tool] = {
                        "tool": tool, "store": store, "url": url, "clients": clients,
                        "seconds": run.sizes.proxy_seconds, "workdir": work, "record": record,
                        "upstream_ca": upstream_ca,
                    }  # fmt: skip
                results = run.measure_each("proxy_peer", specs)
                _proxy_row(run, f"10. {name}, {clients} keep-alive client{'s' * (clients > 1)}",
                           results, target)  # fmt: skip


def _proxy_row(run: Run, measure: str, results: dict[str, dict[str, Any]], target: float) -> None:
    def figure(result: dict[str, Any]) -> str:
        return f"{result['rps']:,.0f} req/s, {result['cpu_per_request_s'] * 1e3:.2f} ms CPU"

    row = Row(measure, target=f">= {target:g}x mitmdump's req/s")
    mine = results["sakura-http"]
    peer = results.get("mitmdump")
    if peer is None:
        row.cells["sakura-http"] = figure(mine)
        row.cells["floor"] = "mitmdump not installed"
    else:
        speedup = mine["rps"] / peer["rps"]
        thrift = peer["cpu_per_request_s"] / max(mine["cpu_per_request_s"], 1e-9)
        cpu = f"{thrift:.1f}x less CPU" if thrift >= 1 else f"{1 / thrift:.1f}x more CPU"
        row.ratios["sakura-http"] = 1 / speedup  # time per request, as the chart draws it
        row.cells["sakura-http"] = f"{speedup:.2f}x mitmdump's rate, {cpu} ({figure(mine)})"
        row.cells["floor"] = f"mitmdump: {figure(peer)}"
        row.met = speedup >= target
    run.add(row)


def measure_diff(run: Run) -> None:
    """8. `sakura-http diff` of a re-recorded cassette: the time per byte for two cassettes of
    4 MB against two of 1 MB.  A diff that grows with the square of the size shows 4x here,
    a linear one 1x."""
    sizes = {"small": run.sizes.diff_bytes // 4, "large": run.sizes.diff_bytes}
    specs = {}
    for name, size in sizes.items():
        old, new = (str(run.workdir / f"diff-{name}-{side}.jsonl") for side in ("old", "new"))
        made = run.measure("rerecorded_cassettes", repeat=1, old=old, new=new, size=size)
        assert made is not None
        sizes[name] = made["bytes"]
        specs[name] = {"old": old, "new": new}
    results = run.measure_each("diff", specs)
    small, large = results["small"]["diff_s"], results["large"]["diff_s"]
    ratio = (large / sizes["large"]) / (small / sizes["small"])
    row = Row(
        f"8. Diff two re-recorded {sizes['large'] / 1e6:.1f} MB cassettes, per byte, vs two of "
        f"{sizes['small'] / 1e6:.1f} MB",
        target="<= 1.5x",
    )
    row.ratios["sakura-http"] = ratio
    row.cells["sakura-http"] = f"{ratio:.2f}x ({_ms(large)})"
    row.cells["floor"] = f"{_ms(small)} for {sizes['small'] / 1e6:.1f} MB"
    row.met = ratio <= 1.5
    run.add(row)


# --- output -----------------------------------------------------------------------------------


def table(run: Run) -> str:
    tools = run.tools()
    head = ["Measure", *tools, "floor", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in run.rows:
        met = {True: "met", False: "NOT met", None: "—"}[row.met]
        cells = [row.cells.get(t, "—") for t in tools]
        extra = [row.cells[k] for k in row.cells if k not in tools and k != "floor"]
        if extra:  # a second serializer of a peer, e.g. vcrpy (json)
            names = [k for k in row.cells if k not in tools and k != "floor"]
            cells[-1] += "; " + "; ".join(f"{n}: {c}" for n, c in zip(names, extra, strict=True))
        lines.append(
            "| "
            + " | ".join([row.measure, *cells, row.cells.get("floor", "—"), row.target, met])
            + " |"
        )
    return "\n".join(lines)


def chart(run: Run, path: Path) -> str:
    """Draw the ratios to the floor per measure and tool; returns a note for the report."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            f"no chart: matplotlib is not installed (pip install --group bench); {path} not written"
        )
    rows = [r for r in run.rows if r.ratios]
    tools = sorted({t for r in rows for t in r.ratios}, key=lambda t: (t != "sakura-http", t))
    colours = {"sakura-http": "#d6336c", "cassetter": "#4c6ef5", "vcrpy": "#868e96"}
    bars = sum(len(r.ratios) for r in rows)
    fig, ax = plt.subplots(figsize=(12, 0.42 * bars + 0.9 * len(rows) + 1.5))
    y = 0.0
    ticks, labels = [], []
    for row in reversed(rows):
        start = y
        for tool in reversed(tools):
            if tool in row.ratios:
                ratio = row.ratios[tool]
                ax.barh(y, ratio, height=0.8, color=colours.get(tool, "#adb5bd"))
                ax.text(ratio * 1.05, y, f"{tool} {ratio:.2f}x", va="center", fontsize=8)
                y += 1
        ticks.append((start + y - 1) / 2)
        labels.append(textwrap.fill(row.measure, 48))
        y += 0.6
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlabel("time relative to the floor measured in the same run (1.0 = the floor; log)")
    ax.set_title(f"sakura-http vs peers, one run on {run.machine}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=path.suffix.lstrip(".") or "svg")
    return f"chart written to {path}"


def _machine() -> str:
    cpus = os.cpu_count() or 0
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                model,
            )
    except OSError:
        pass
    return f"{model}, {cpus} cores, Python {platform.python_version()}, {platform.system()}"


@contextmanager
def local_server(tls: str | None = None) -> Iterator[str]:
    """The benchmarks' server on 127.0.0.1 (https with `tls`, a PEM certificate and key)."""
    server = subprocess.Popen(
        [sys.executable, str(HERE / "server.py"), *(["--tls", tls] if tls else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline().split()[1])
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)


def measure_all(run: Run) -> None:
    """Every measure, in the order of the table."""
    recorded = measure_recording(run)
    replayed = measure_replay(run, recorded)
    measure_size(run, recorded)
    measure_load(run, recorded)
    measure_streaming(run)
    measure_import(run)
    measure_proxy(run)
    measure_proxy_peers(run)
    measure_diff(run)
    measure_clients(run, replayed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument("--repeat", type=int, help="repetitions per measure (median reported)")
    parser.add_argument("--chart", type=Path, default=HERE / "results" / "chart.svg")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--proxy-peers", action="store_true", help="only measure 10, the proxy against mitmdump"
    )
    parser.add_argument(
        "--replot", type=Path, metavar="JSON", help="draw the chart of an earlier --json run"
    )
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads(args.replot.read_text())
        run = Run(QUICK if saved["quick"] else FULL, Path("."))
        run.rows = [Row(**row) for row in saved["rows"]]
        run.machine = saved["machine"]
        print(table(run))
        print(chart(run, args.chart))
        return 0
    sizes = QUICK if args.quick else FULL
    if args.repeat:
        sizes = Sizes(args.repeat, *list(vars(sizes).values())[1:])
    print(f"sakura-http benchmarks ({'quick' if args.quick else 'full'}; {_machine()})")
    with tempfile.TemporaryDirectory(prefix="sakura-bench-") as tmp, local_server() as base:
        run = Run(sizes, Path(tmp), base)
        if args.proxy_peers:
            measure_proxy_peers(run)
        else:
            measure_all(run)
    print()
    print(table(run))
    print()
    for note in run.notes:
        print(f"note: {note}")
    print(chart(run, args.chart))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": run.machine,
                    "quick": args.quick,
                    "rows": [vars(r) for r in run.rows],
                    "notes": run.notes,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
