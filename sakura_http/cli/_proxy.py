"""`sakura-http proxy` and `sakura-http ca`: the command-line face of `sakura_http.proxy`.

`sakura_http.proxy` (and so cryptography) is imported only when one of these commands runs, so
the other subcommands start as fast as before and work without the ``proxy`` extra.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._config import DEFAULT_SECRET_QUERY_PARAMS
from .._rules import Rules, Scrub
from ._usage import UsageError

__all__ = ["add_proxy_commands", "load_rules"]

_MODES = ("none", "new_episodes", "all")
# NAME=URL: a name (no ':' or '/', so never a URL's scheme or path) before the first '='.
_NAMED = re.compile(r"[^:/=]+=")


def _import_proxy() -> ModuleType:
    try:
        import sakura_http.proxy as proxy
    except ImportError as exc:
        raise UsageError(
            f"the proxy needs the proxy extra ({exc}): pip install 'sakura-http[proxy]'"
        ) from None
    return proxy


def _log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("sakura_http.proxy")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among `names` given on the command line: the others keep `run()`'s
    defaults, which live in one place (`sakura_http.proxy`)."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _upstream_tls(args: argparse.Namespace) -> dict[str, Any]:
    """serve()'s `verify`: a CA bundle, no check at all, or (neither given) its default."""
    if args.upstream_insecure:
        return {"verify": False}
    if args.upstream_ca is not None:
        if not os.path.isfile(args.upstream_ca):
            raise UsageError(f"--upstream-ca {args.upstream_ca}: no such file")
        return {"verify": args.upstream_ca}
    return {}


def load_rules(spec: str) -> Rules:
    """The `Rules` object `spec` ("MODULE:NAME") names, for every command's ``--rules`` (proxy,
    verify --update).  The current directory comes first on the import path, as it does for
    ``python -m``, so a project's own module is found; `UsageError` says what is wrong."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UsageError(
            f"--rules {spec}: give MODULE:NAME, the module and the name of a Rules object in "
            "it, e.g. --rules tests.cassette_rules:RULES"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or module_name
        if module_name != missing and not module_name.startswith(f"{missing}."):
            # The module was found: what it imports is missing, not the module itself.
            advice = f"install {missing} where sakura-http runs"
        else:
            advice = "run sakura-http from the folder the module is found from, or set PYTHONPATH"
        raise UsageError(f"--rules {spec}: cannot import {module_name} ({exc}); {advice}") from None
    try:
        value = getattr(module, name)
    except AttributeError:
        raise UsageError(f"--rules {spec}: {module_name} has no name {name!r}") from None
    if not isinstance(value, Rules):
        raise UsageError(
            f"--rules {spec}: {module_name}.{name} is a {type(value).__name__}, not a "
            "sakura_http.Rules object"
        )
    return value


def _rules(args: argparse.Namespace) -> Rules:
    """The rules the flags give: those of ``--rules``, the ``--llm`` preset, then each flag."""
    rules = Rules(
        ignore_query=args.ignore_query,
        ignore_json=args.ignore_json,
        ignore_headers=args.ignore_header,
        scrub=[
            *(Scrub.json(path) for path in args.scrub_json),
            *(Scrub.regex(pattern) for pattern in args.scrub_regex),
            *(Scrub.response_header(name) for name in args.scrub_response_header),
        ],
    )
    if args.llm:
        rules = Rules.llm(rules)
    if args.rules is not None:
        rules = load_rules(args.rules) | rules
    return rules


def _secret_query_params(args: argparse.Namespace) -> dict[str, Any]:
    """``--secret-query-param`` adds to the default secret query parameters, never replaces them."""
    if not args.secret_query_params:
        return {}
    return {"secret_query_params": DEFAULT_SECRET_QUERY_PARAMS | set(args.secret_query_params)}


def _upstream(values: list[str] | None) -> str | dict[str, str] | None:
    """``--upstream URL`` once, or ``--upstream NAME=URL`` once or more (served on /NAME/)."""
    if not values:
        return None
    named = [value for value in values if _NAMED.match(value)]
    if not named and len(values) == 1:
        return values[0]
    if len(named) != len(values):
        raise UsageError(
            "--upstream: to serve several upstreams, name each one: --upstream "
            "api=https://api.example.com --upstream auth=https://auth.example.com (clients "
            "then send /api/... and /auth/...)"
        )
    routes: dict[str, str] = {}
    for value in values:
        name, _, url = value.partition("=")
        if name in routes:
            raise UsageError(f"--upstream: the name {name!r} is given twice")
        routes[name] = url
    return routes


def _proxy(args: argparse.Namespace) -> int:
    proxy = _import_proxy()
    from .._exceptions import CassetteError

    _log_to_stderr()

    where = args.cassette
    if args.cassette_dir is not None:
        where = os.path.join(args.cassette_dir, "HOST[_PORT].jsonl")

    def ready(url: str, mode: Any) -> None:
        sys.stdout.write(
            f"sakura-http proxy listening on {url} (mode {mode.value}, cassette {where})\n"
        )
        sys.stdout.flush()

    try:
        rules = _rules(args)
        proxy.run(
            args.cassette,
            cassette_dir=args.cassette_dir,
            rules=rules,
            on_ready=ready,
            mode=args.mode,
            listen=args.listen,
            upstream=_upstream(args.upstream),
            secret_headers=args.secret_headers,
            record_hosts=args.record_hosts,
            passthrough_hosts=args.passthrough_hosts,
            ca_dir=args.ca_dir,
            stream_through=args.stream_through,
            record_timings=args.record_timings,
            replay_latency=args.replay_latency,
            **_given(
                args,
                "shutdown_timeout",
                "header_timeout",
                "idle_timeout",
                "max_body_bytes",
                "allow_headers",
                "allow_repeats",
                "record_errors",
                "replay_chunk_size",
            ),
            **_secret_query_params(args),
            **_upstream_tls(args),
        )
    except proxy.RecordingIncomplete as exc:  # not a usage error: the run itself fell short
        sys.stderr.write(f"sakura-http proxy: error: {exc}\n")
        return 1
    except (CassetteError, OSError) as exc:
        raise UsageError(str(exc)) from None
    return 0


def _ca(args: argparse.Namespace) -> int:
    proxy = _import_proxy()
    from .._exceptions import CassetteError

    try:
        ca = proxy.CertificateAuthority(args.ca_dir)
    except (CassetteError, OSError) as exc:
        raise UsageError(str(exc)) from None
    path = ca.cert_path
    sys.stdout.write(
        f"{path}\n"
        "The CA certificate of `sakura-http proxy` in forward mode (its private key is beside "
        "it, readable by you only).\nTrust it in the clients you send through the proxy:\n"
        f"  curl --cacert {path} ...\n"
        f"  SSL_CERT_FILE={path}        Python's ssl, httpx, OpenSSL-based tools\n"
        f"  REQUESTS_CA_BUNDLE={path}   requests\n"
        f"  NODE_EXTRA_CA_CERTS={path}  Node.js\n"
        "sakura_http.proxy.serve(...).env() sets all of them, with HTTP_PROXY and HTTPS_PROXY.\n"
    )
    return 0


def add_proxy_commands(
    command: Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser],
) -> None:
    """Register `proxy` and `ca` through the CLI's `command(name, handler, help)` helper."""
    proxy = command(
        "proxy",
        _proxy,
        "Serve a cassette as a local HTTP proxy for clients that are not httpx: replay it, "
        "record what is missing (--mode new_episodes) or re-record it (--mode all). Stops "
        "gracefully on SIGINT or SIGTERM.",
    )
    proxy.add_argument(
        "cassette", metavar="CASSETTE", nargs="?", help="the cassette (or give --cassette-dir)"
    )
    proxy.add_argument(
        "--cassette-dir",
        metavar="DIR",
        help="forward mode: one cassette per upstream origin, DIR/HOST.jsonl or "
        "DIR/HOST_PORT.jsonl (a port other than 80 and 443), instead of CASSETTE",
    )
    proxy.add_argument("--mode", choices=_MODES, default="none", help="record mode (none)")
    proxy.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="address to listen on (127.0.0.1:0, a free port); another than loopback warns",
    )
    proxy.add_argument(
        "--upstream",
        action="append",
        metavar="URL|NAME=URL",
        help="reverse mode: serve requests for this URL (clients use the proxy as base URL); "
        "NAME=URL, repeatable: serve several, each under the path prefix /NAME; without it, a "
        "forward proxy for HTTP_PROXY/HTTPS_PROXY clients",
    )
    proxy.add_argument(
        "--secret-header",
        dest="secret_headers",
        action="append",
        default=[],
        metavar="NAME",
        help="a header forwarded but never written or matched (repeatable)",
    )
    proxy.add_argument(
        "--allow-header",
        dest="allow_headers",
        action="append",
        default=None,
        metavar="NAME",
        help="a header that looks like a credential but is not: recorded and matched as sent "
        "(repeatable)",
    )
    proxy.add_argument(
        "--secret-query-param",
        dest="secret_query_params",
        action="append",
        default=None,
        metavar="NAME",
        help="a query parameter whose value is written as <redacted>, on top of the default "
        "ones (sig, token, api_key, ...) (repeatable)",
    )
    proxy.add_argument(
        "--record-host",
        dest="record_hosts",
        action="append",
        default=None,
        metavar="HOST[:PORT]",
        help="only record from these hosts (repeatable; default: any)",
    )
    proxy.add_argument(
        "--passthrough-host",
        dest="passthrough_hosts",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="forward requests to these hosts without matching or recording (repeatable)",
    )
    for flag, metavar, what in (
        ("--ignore-query", "NAME", "a query parameter left out of matching (still recorded)"),
        ("--ignore-json", "PATH", "a JSON body path left out of matching, e.g. metadata.user_id"),
        ("--ignore-header", "NAME", "a request header left out of matching, e.g. x-debug-*"),
        ("--scrub-json", "PATH", 'a JSON body path whose value is written as "<scrubbed>"'),
        ("--scrub-regex", "REGEX", 'a pattern written as "<scrubbed>" in URLs, headers, bodies'),
        ("--scrub-response-header", "NAME", 'a response header written as "<scrubbed>"'),
    ):
        proxy.add_argument(
            flag,
            dest=flag[2:].replace("-", "_"),
            action="append",
            default=[],
            metavar=metavar,
            help=f"{what} (repeatable; see Rules in docs/matching.md)",
        )
    proxy.add_argument(
        "--llm",
        action="store_true",
        help="the Rules.llm() preset: the per-call response headers of LLM APIs (dates, "
        "request ids, rate limits) written as stable placeholders",
    )
    proxy.add_argument(
        "--rules",
        metavar="MODULE:NAME",
        help="a sakura_http.Rules object to load (e.g. tests.cassette_rules:RULES), combined "
        "with the rule flags; the current directory is on the import path",
    )
    proxy.add_argument(
        "--max-body-bytes",
        type=int,
        metavar="N",
        help="the largest request or response body stored, in bytes (16 MiB); a larger one "
        "answers 502 body-too-large",
    )
    proxy.add_argument(
        "--allow-repeats",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="replay the last recorded exchange again for a request repeated more often than "
        "it was recorded (the default); --no-allow-repeats answers such a request as a miss",
    )
    proxy.add_argument(
        "--record-errors",
        action="store_true",
        default=None,
        help="record a failure to reach the upstream (refused, reset, timed out) as an exchange "
        "that replays as the same failure (a 502 answer)",
    )
    proxy.add_argument(
        "--replay-chunk-size",
        type=int,
        metavar="N",
        help="the size of the pieces a body recorded whole is replayed in, in bytes",
    )
    tls = proxy.add_mutually_exclusive_group()
    tls.add_argument(
        "--upstream-ca",
        metavar="FILE",
        help="a CA bundle (PEM) that checks the upstream's certificate, instead of the "
        "system's CAs or SSL_CERT_FILE",
    )
    tls.add_argument(
        "--upstream-insecure",
        action="store_true",
        help="do not check the upstream's certificate (a local test server only)",
    )
    proxy.add_argument(
        "--ca-dir", metavar="DIR", help="forward mode: the CA's folder (see `sakura-http ca`)"
    )
    proxy.add_argument(
        "--stream-through",
        action="store_true",
        help="while recording, hand each chunk on as it arrives",
    )
    proxy.add_argument("--record-timings", action="store_true", help="record chunk arrival times")
    proxy.add_argument(
        "--shutdown-timeout",
        type=float,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long exchanges in flight may take to finish before they "
        "are cancelled (10; in mode all a cancelled one keeps the old cassette, exit 1)",
    )
    proxy.add_argument(
        "--header-timeout",
        type=float,
        metavar="SECONDS",
        help="close a connection whose client takes longer to send a request's line and "
        "headers (30)",
    )
    proxy.add_argument(
        "--idle-timeout",
        type=float,
        metavar="SECONDS",
        help="close a connection whose client stays silent this long between requests or "
        "mid-body, or leaves its answer unread (60)",
    )
    proxy.add_argument(
        "--replay-latency",
        type=float,
        default=0.0,
        metavar="F",
        help="replay recorded chunk timings scaled by F (0: as fast as possible)",
    )

    ca = command(
        "ca",
        _ca,
        "Print the path of the proxy's CA certificate (created on first use) and how to trust it.",
    )
    ca.add_argument("--ca-dir", metavar="DIR", help="the CA's folder (default: per-user)")
