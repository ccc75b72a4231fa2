"""`sakura-http verify`: re-send a cassette's requests to the live API and say what drifted.

Each recorded request is sent again, in recorded order, with httpx directly (nothing is
recorded, the cassette is never written), to the hosts the user names and no other; the live
response's shape is compared with the recorded one by the engine (`_drift.check_exchange`).
Credentials come from the command line (`--header`, `--header-for`, which may name environment
variables), never from the cassette.

With `--update`, the requests go through a `RecordingTransport` re-recording the cassette (mode
"all"), so what is written passes the same safety rules as any recording: the credentials given
with `--header` and `--header-for` are secret headers (never written, their echoes redacted),
with those `--secret-header` names, and `--rules MODULE:NAME` scrubs.  The re-recording replaces
the cassette atomically only when the cassette drifted and every one of its exchanges was
re-recorded; otherwise it is dropped and the file is left as it was.

This module imports the engine and `cli._show` only, not the CLI package itself: it registers
its subcommand through the `command(...)` helper `build_parser` hands it, and prints its own
errors.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from .._core import ENV_STRICT, RecordMode, is_strict
from .._drift import OUTCOME_WORDS, Checked, check_exchange
from .._exceptions import CassetteError
from .._format import Exchange, Headers
from .._hosts import HostList
from .._libraries import url_host_port
from .._matching import HOP_BY_HOP_HEADERS
from .._placeholders import is_placeholder
from .._policy import REDACTED, names_a_secret
from .._rules import Rules
from .._transport import RecordingTransport
from ._proxy import load_rules
from ._show import load_named, url_shown
from ._usage import EXIT_FOUND, EXIT_OK, PROG, UsageError, cassettes_below

__all__ = ["EXIT_NO_HOSTS", "HOSTS_VARIABLE", "add_verify_command"]

#: Exit status when no host may be reached (EX_TEMPFAIL, as `pytest --record` without hosts).
EXIT_NO_HOSTS = 75
#: The environment variable read when no --record-host is given: hosts separated by commas or
#: spaces.
HOSTS_VARIABLE = "SAKURA_HTTP_RECORD_HOSTS"

_PROG = f"{PROG} verify"

# Request headers not sent again as recorded: httpx sets them for this connection and body
# (accept-encoding to what it can decode, so the live body is read as the recorded one was).
_NOT_RESENT = frozenset(
    {"host", "content-length", "transfer-encoding", "accept-encoding", *HOP_BY_HOP_HEADERS}
)
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\$))")


@dataclass
class _Verified:
    path: Path
    results: list[Checked]
    needed: list[str]  # credential headers the requests need that no option gave
    #: --update: None when the cassette did not drift (nothing to update), else whether it was
    #: re-recorded, and why not.
    updated: bool | None = None
    not_updated: str | None = None


# --- options ---------------------------------------------------------------------------------


def _expand(text: str, what: str, environ: Mapping[str, str]) -> str:
    """`text` with `$NAME` and `${NAME}` replaced by the environment's values (`$$` is `$`), so
    a secret can be named in single quotes and never appear in the process list."""

    def value(match: re.Match[str]) -> str:
        if match.group(3):
            return "$"
        name = match.group(1) or match.group(2)
        if name not in environ:
            raise UsageError(f"{what} names ${name}, which is not set in the environment")
        return environ[name]

    return _VARIABLE.sub(value, text)


def _header(text: str, what: str, environ: Mapping[str, str]) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    name = name.strip().lower()
    if not sep or not name or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9a-z-]+", name):
        # The text itself is not printed: it may be a credential given without its name.
        raise UsageError(
            f"a {what} of {len(text)} characters is not 'name: value' (e.g. 'authorization: "
            "Bearer $KEY')"
        )
    return name, _expand(value.strip(), f"{what} {name}", environ)


def _hosts(args: argparse.Namespace, environ: Mapping[str, str]) -> HostList:
    entries = args.record_hosts or re.split(r"[\s,]+", environ.get(HOSTS_VARIABLE, ""))
    return HostList(entry for entry in entries if entry.strip())


def _cassette_files(names: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            files.extend(cassettes_below(path))
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    return files


# --- sending ---------------------------------------------------------------------------------


def _needs_value(name: str, value: str) -> bool:
    """Whether a recorded request header stands in for a credential the user must supply."""
    return value == REDACTED or (names_a_secret(name) and is_placeholder(value))


def _request_headers(
    recorded: Headers, given: list[tuple[str, str]], needed: set[str]
) -> list[tuple[str, str]]:
    names = {name for name, _ in given}
    headers: list[tuple[str, str]] = []
    for name, value in recorded:
        if name in _NOT_RESENT or name in names:
            continue
        if _needs_value(name, value):
            needed.add(name)
            continue
        headers.append((name, value))
    return headers + given


def _verify_exchange(
    client: httpx.Client,
    index: int,
    recorded: Exchange,
    hosts: HostList,
    given: Callable[[tuple[str, int | None]], list[tuple[str, str]]],
    ignore_headers: Sequence[str],
    needed: set[str],
) -> Checked:
    try:
        url = httpx.URL(recorded.url)
    except httpx.InvalidURL as exc:
        return Checked(index, recorded, "failed", reason=f"the recorded URL is invalid: {exc}")
    host = url_host_port(url)
    if host not in hosts:
        where = url.host if url.port is None else f"{url.host}:{url.port}"
        return Checked(index, recorded, "skipped", reason=f"{where} is not a --record-host")
    if recorded.error is not None and recorded.status is None:
        return Checked(index, recorded, "skipped", reason="it recorded a transport failure")
    credentials = given(host)
    headers = _request_headers(recorded.headers, credentials, needed)
    # Declared secret when recorded: left out of the file, only the names kept.
    secret = recorded.extra.get("secret_headers")
    if isinstance(secret, list):
        given_names = {name for name, _ in credentials}
        needed.update(n for n in secret if isinstance(n, str) and n not in given_names)
    try:
        response = client.request(recorded.method, url, headers=headers, content=recorded.body)
    except (httpx.HTTPError, CassetteError) as exc:  # CassetteError: --update's recording
        return Checked(index, recorded, "failed", reason=f"{type(exc).__name__}: {exc}")
    except UnicodeEncodeError as exc:  # a recorded header value httpx sends only as ASCII
        return Checked(
            index,
            recorded,
            "failed",
            reason=f"the recorded request cannot be sent (a header value is not ASCII: {exc})",
        )
    live = Exchange(
        method=recorded.method,
        url=recorded.url,
        status=response.status_code,
        response_headers=tuple(
            (name.lower(), value) for name, value in response.headers.multi_items()
        ),
        response_body=response.content,
    )
    reason = None
    if response.status_code in (401, 403, 407) and not credentials:
        reason = (
            f"the origin answered {response.status_code} and no credentials were given for "
            "it: pass them with --header or --header-for"
        )
    return check_exchange(index, recorded, live, ignore_headers=ignore_headers, reason=reason)


# --- output ----------------------------------------------------------------------------------


def _text(verified: list[_Verified]) -> str:
    lines: list[str] = []
    for cassette in verified:
        lines.append(f"{cassette.path}")
        if not cassette.results:
            lines.append("  (no exchanges)")
        for result in cassette.results:
            lines.extend(f"  {line}" for line in result.lines())
        if cassette.needed:
            lines.append(
                f"  needed, not given: {', '.join(cassette.needed)} (recorded without its value: "
                "give it with --header or --header-for)"
            )
        if cassette.updated:
            count = len(cassette.results)
            lines.append(
                f"  updated: re-recorded {count} exchange{'s' if count != 1 else ''} (replaced "
                "the old file)"
            )
        elif cassette.not_updated:
            lines.append(f"  not updated: {cassette.not_updated} (the old file was kept)")
    lines.append(_summary_line(verified))
    return "\n".join(lines) + "\n"


def _counts(verified: list[_Verified]) -> dict[str, int]:
    results = [result for cassette in verified for result in cassette.results]
    counts = {"cassettes": len(verified), "exchanges": len(results)}
    for outcome in OUTCOME_WORDS:
        counts[outcome] = sum(result.outcome == outcome for result in results)
    return counts


def _summary_line(verified: list[_Verified]) -> str:
    n = _counts(verified)
    cassettes = "1 cassette" if n["cassettes"] == 1 else f"{n['cassettes']} cassettes"
    exchanges = "1 exchange" if n["exchanges"] == 1 else f"{n['exchanges']} exchanges"
    parts = ", ".join(f"{n[outcome]} {word}" for outcome, word in OUTCOME_WORDS.items())
    return f"{cassettes}, {exchanges}: {parts}"


def _json(verified: list[_Verified]) -> dict[str, Any]:
    return {
        "cassettes": [
            {
                "path": str(cassette.path),
                "exchanges": [
                    {
                        "index": result.index + 1,
                        "id": result.recorded.id,
                        "method": result.recorded.method,
                        "url": url_shown(result.recorded.url),  # as Checked.label shows it
                        "outcome": result.outcome,
                        "recorded_status": result.recorded.status,
                        "live_status": result.live_status,
                        "differences": [d.to_json() for d in result.differences],
                        "reason": result.reason,
                    }
                    for result in cassette.results
                ],
                "needed_not_given": cassette.needed,
                "updated": cassette.updated,
                "not_updated_reason": cassette.not_updated,
            }
            for cassette in verified
        ],
        "summary": _counts(verified),
    }


# --- the command -----------------------------------------------------------------------------


def _verify(args: argparse.Namespace) -> int:
    environ = os.environ
    hosts = _hosts(args, environ)
    if not hosts:
        sys.stderr.write(
            f"{_PROG}: no host may be reached: name the API hosts to re-send the recorded "
            f"requests to with --record-host HOST[:PORT] (repeatable) or {HOSTS_VARIABLE}="
            "host1,host2; the requests to other hosts are skipped\n"
        )
        return EXIT_NO_HOSTS
    # A UsageError (a bad option, an unreadable cassette) goes to main(): one line, exit 2.
    every = [_header(text, "--header", environ) for text in args.header]
    per_host = [
        (HostList([host]), _header(text, "--header-for", environ)) for host, text in args.header_for
    ]
    cassettes = [(path, load_named(path).exchanges) for path in _cassette_files(args.cassettes)]
    if args.update and is_strict(environ):
        raise UsageError(
            f"--update records, and {ENV_STRICT}=1 forbids recording: unset {ENV_STRICT} "
            "to re-record the drifted cassettes"
        )
    rules = load_rules(args.rules) if args.rules is not None else Rules()
    # Everything given on the command line is a credential: never written when re-recording.
    secret = {*args.secret_headers, *(name for name, _ in every)}
    secret.update(name for _, (name, _) in per_host)

    def given(host: tuple[str, int | None]) -> list[tuple[str, str]]:
        chosen = dict(every)
        chosen.update(header for hosts_of, header in per_host if host in hosts_of)
        return list(chosen.items())

    ignore = [name.lower() for name in args.ignore_header]
    verified: list[_Verified] = []
    for path, exchanges in cassettes:
        recording = None
        if args.update:
            recording = RecordingTransport(
                path,
                outer=httpx.HTTPTransport(),
                mode=RecordMode.ALL,
                record_hosts=list(hosts.entries),
                secret_headers=sorted(secret),
                allow_headers=args.allow_headers,
                rules=rules,
                environ={},  # the mode is "all", whatever SAKURA_HTTP_RECORD says
            )
        client = _client(recording, args.timeout)
        drops = True  # a re-recording is dropped unless it is complete and needed
        try:
            needed: set[str] = set()
            results = [
                _verify_exchange(client, index, exchange, hosts, given, ignore, needed)
                for index, exchange in enumerate(exchanges)
            ]
            cassette = _Verified(path, results, sorted(needed))
            if recording is not None and any(r.outcome == "drifted" for r in results):
                cassette.not_updated = _incomplete(results) or _uncredentialed(cassette.needed)
                drops = cassette.not_updated is not None
                cassette.updated = not drops
            verified.append(cassette)
        finally:
            if recording is not None:
                recording.close(failed=drops)  # atomic: replaces the file, or keeps it
            client.close()
    if args.json:
        sys.stdout.write(orjson.dumps(_json(verified), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(_text(verified))
    counts = _counts(verified)
    return EXIT_FOUND if counts["drifted"] or counts["failed"] else EXIT_OK


def _client(recording: RecordingTransport | None, timeout: float) -> httpx.Client:
    """The client the requests are sent with: through `recording` under --update, else
    straight to the network.  No default `accept` header: a recorded request without one is
    sent without one, so a re-recording matches the requests of the code that made it."""
    client = httpx.Client(transport=recording, timeout=timeout, follow_redirects=False)
    del client.headers["accept"]
    return client


def _uncredentialed(needed: list[str]) -> str | None:
    """Why a drifted cassette is not replaced when its requests went without a credential they
    need (None: none did): the drift may be the credential's absence (a 401), and the
    re-recording would replace the recorded answers with it and no longer name the header."""
    if not needed:
        return None
    return (
        f"its requests were sent without {', '.join(needed)}, which they need: give it with "
        "--header or --header-for"
    )


def _incomplete(results: list[Checked]) -> str | None:
    """Why a drifted cassette cannot be replaced by its re-recording (None: it can): an exchange
    that was skipped or failed would be missing from it."""
    missing = [r for r in results if r.outcome in ("skipped", "failed")]
    if not missing:
        return None
    shown = ", ".join(f"#{r.index + 1}" for r in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return (
        f"{shown}{more} could not be re-recorded (skipped or failed), and replacing the "
        "cassette would lose them; re-record it from its tests (pytest --record-all)"
    )


def add_verify_command(
    command: Callable[..., argparse.ArgumentParser],
) -> None:
    """Register `verify` through the CLI's `command(name, handler, summary, details)` helper."""
    verify = command(
        "verify",
        _verify,
        "Re-send each cassette's requests to the live API and report the responses whose "
        "shape drifted; exit 1 when one did (or could not be verified).",
        "Only hosts named by --record-host (or SAKURA_HTTP_RECORD_HOSTS) are reached; without "
        "any, nothing is sent (exit 75). Shapes, not values, are compared: the status class, "
        "response header names (volatile ones left out), the content type, JSON keys and "
        "value types, enum-like values, SSE event names and their data. Credentials are "
        "given with --header or --header-for, never read from the cassette. The cassettes are "
        "not written, unless --update re-records the drifted ones. A folder stands for every "
        "*.jsonl file below it.",
    )
    verify.add_argument("cassettes", metavar="CASSETTE", nargs="+")
    verify.add_argument(
        "--record-host",
        dest="record_hosts",
        action="append",
        default=None,
        metavar="HOST[:PORT]",
        help=f"a host the requests may be sent to (repeatable; default: ${HOSTS_VARIABLE})",
    )
    verify.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header added to every request, e.g. 'authorization: Bearer $TOKEN' ($NAME and "
        "${NAME} are read from the environment; repeatable)",
    )
    verify.add_argument(
        "--header-for",
        action="append",
        nargs=2,
        default=[],
        metavar=("HOST[:PORT]", "'NAME: VALUE'"),
        help="a header added to the requests to one host (repeatable)",
    )
    verify.add_argument(
        "--ignore-header",
        action="append",
        default=[],
        metavar="NAME",
        help="a response header whose presence is not compared: a name, or a pattern such as "
        "x-ratelimit-* (repeatable)",
    )
    verify.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for each response (default 60)",
    )
    verify.add_argument("--json", action="store_true", help="print the report as one JSON document")
    verify.add_argument(
        "--update",
        action="store_true",
        help="re-record each cassette that drifted (mode all: the file is replaced atomically "
        "once every exchange of it was re-recorded, else kept), with the safety rules of any "
        "recording; the credentials given with --header and --header-for are never written",
    )
    verify.add_argument(
        "--secret-header",
        dest="secret_headers",
        action="append",
        default=[],
        metavar="NAME",
        help="--update: a request header sent but never written (repeatable), as the "
        "cassette's secret_headers at recording",
    )
    verify.add_argument(
        "--allow-header",
        dest="allow_headers",
        action="append",
        default=[],
        metavar="NAME",
        help="--update: a header name that looks like a credential but is not, written as "
        "recorded (repeatable), as the cassette's allow_headers",
    )
    verify.add_argument(
        "--rules",
        metavar="MODULE:NAME",
        help="--update: the sakura_http.Rules the cassette was recorded with (its scrubs and "
        "before_record hook), e.g. tests.cassette_rules:RULES; the current directory is on "
        "the import path",
    )
