"""`_matching`: URL canonicalization and secret query parameters (and what the transport
writes and matches because of them); explaining a miss: which recorded exchanges are named as
the nearest, and in which order."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sakura_http import (
    DEFAULT_SECRET_QUERY_PARAMS,
    Advice,
    RecordingTransport,
    Rules,
    Scrub,
    canonical_url,
)
from sakura_http._exchange import RequestData
from sakura_http._format import Exchange
from sakura_http._libraries import _request_headers, _url_view, library_of
from sakura_http._matching import (
    DEFAULT_IGNORE_HEADERS,
    Matcher,
    _canonical_url,
    explain_miss,
)
from sakura_http.pytest_plugin import PytestAdvice


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTPS://API.Example.TEST/v1/Items", "https://api.example.test/v1/Items"),
        ("https://api.example.test:443/x", "https://api.example.test/x"),
        ("http://api.example.test:80/x", "http://api.example.test/x"),
        ("http://api.example.test:8080/x", "http://api.example.test:8080/x"),
        ("https://alice:hunter2@api.example.test/x", "https://api.example.test/x"),
        ("https://bücher.example/x", "https://xn--bcher-kva.example/x"),
        ("http://[::1]:80/x", "http://[::1]/x"),
        ("https://h.example/a%7eb%2fc?q=%41%2a", "https://h.example/a~b%2Fc?q=A%2A"),
        ("https://h.example/p?b=2&a=1&b=1", "https://h.example/p?b=2&a=1&b=1"),
    ],
)
def test_canonical_url(url: str, canonical: str) -> None:
    assert canonical_url(url) == canonical


def test_secret_query_values_are_redacted_by_name() -> None:
    url = "https://h.example/p?Key=AIzaSyFAKE&x=1&token=t&token=u&api_key"
    assert canonical_url(url, DEFAULT_SECRET_QUERY_PARAMS) == (
        "https://h.example/p?Key=<redacted>&x=1&token=<redacted>&token=<redacted>&api_key"
    )


def test_a_proxy_view_and_a_client_view_match() -> None:
    # What a proxy rebuilds from the request line and Host header, and what httpx sends.
    seen_by_proxy = "http://API.example.test:80/v1/items?x=%7e"
    sent_by_client = str(httpx.URL("http://api.example.test/v1/items?x=~"))
    assert canonical_url(seen_by_proxy) == canonical_url(sent_by_client)


def test_credentials_in_urls_never_reach_the_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    outer = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
    url = "https://alice:hunter2@api.example.test/x?key=AIzaSyFAKE-KEY-0123456789&page=2"
    with RecordingTransport(
        path, outer=outer, mode="new_episodes", secret_headers=["authorization"]
    ) as transport:
        assert httpx.Client(transport=transport).get(url).text == "ok"
    data = path.read_bytes()
    assert b"hunter2" not in data
    assert b"alice" not in data
    assert b"AIzaSyFAKE" not in data
    recorded = json.loads(data.splitlines()[1])
    assert recorded["url"] == "https://api.example.test/x?key=<redacted>&page=2"
    # Replay matches whatever key is sent now, and never prints it in a miss.
    with RecordingTransport(path, secret_headers=["authorization"]) as replay:
        client = httpx.Client(transport=replay)
        other = "https://bob:pw2@api.example.test/x?key=ANOTHER-KEY-value&page=2"
        assert client.get(other).text == "ok"
        with pytest.raises(Exception) as caught:
            client.get("https://api.example.test/x?key=ANOTHER-KEY-value&page=3")
        assert "ANOTHER-KEY-value" not in str(caught.value)


# Pieces that meet every rule of canonicalization: case, escapes, ports, userinfo, fragments.
_URL_PARTS = st.lists(
    st.sampled_from(
        ["http", "https", "HTTP", "://", "a", "B", "0", ".", "-", ":", "80", "443", "080", "8080",
         "/", "?", "&", "=", "%", "%7e", "%2F", "#", "@", "~", " ", "\t", "é", "[::1]", "key"]
    ),
    max_size=14,
).map("".join)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(url=_URL_PARTS | _URL_PARTS.map(lambda rest: "http://h.example" + rest))
def test_the_plain_url_shortcut_agrees_with_full_canonicalization(url: str) -> None:
    # canonical_url returns a URL that needs no change without parsing it: it must say exactly
    # what the full canonicalization says, with and without secret query parameters.
    for secrets in (frozenset(), DEFAULT_SECRET_QUERY_PARAMS):
        assert canonical_url(url, secrets) == _canonical_url(url, secrets)


_URL_TAILS = st.lists(
    st.sampled_from(
        ["a", "B", "0", ".", "-", ":", "80", "443", "8080", "/", "?", "&", "=", "%", "%7e",
         "%2F", "%3c", "#", "@", "~", " ", "\t", "é", ";", "key", "Key", "token", "<", "\\"]
    ),
    max_size=14,
).map("".join)  # fmt: skip
_URL_HEADS = st.sampled_from(
    ["http://h.example", "HTTPS://H.Example", "https://h.example:443", "http://h.example:8080",
     "ws://h.example", "http://u:p@h.example", "http://127.0.0.1:9", "http://[::1]:8080",
     "http://bücher.example", "http://xn--bcher-kva.example", "http://my_host.test"]
)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(head=_URL_HEADS, tail=_URL_TAILS)
def test_a_request_url_built_from_its_parts_is_its_canonical_form(head: str, tail: str) -> None:
    # The transport canonicalizes a request's URL from the parts httpx parsed it into, without
    # building its text (`_url_view`): it must say exactly what `canonical_url` of the text
    # says, and give the host and port `host_port` gives, for any URL httpx accepts.
    try:
        request = httpx.Request("GET", head + tail)
    except (httpx.InvalidURL, UnicodeError):  # not a URL httpx sends (idna.IDNAError)
        return
    library = library_of(request)
    for secrets in (frozenset(), DEFAULT_SECRET_QUERY_PARAMS):
        data = library.request_data(request, secrets)
        assert data.url == canonical_url(str(request.url), secrets)
        assert (data.host, data.port) == library.host_port(request)
        # A URL without the parts (an httpx that keeps them elsewhere) takes the public way.
        public = _PublicURL(request.url)
        assert _url_view(public, secrets) == (data.url, data.host, data.port)


_HEADER_VALUES = st.binary(max_size=6).filter(lambda v: b"\r" not in v and b"\n" not in v)


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(
            st.sampled_from([b"Accept", b"x-Trace", b"X-TRACE", b"user-agent"]), _HEADER_VALUES
        ),
        max_size=4,
    )
)
def test_request_header_text_is_what_httpx_presents(pairs: list[tuple[bytes, bytes]]) -> None:
    # The text of a request's headers is memoized by httpx's own header entries; a Headers that
    # keeps no such entries is read through its public `raw`: both say what `multi_items()` says.
    headers = httpx.Headers(pairs)
    expected = tuple((name.lower(), value) for name, value in headers.multi_items())
    assert _request_headers(headers) == expected
    assert _request_headers(_PublicHeaders(headers)) == expected


class _PublicHeaders:
    """httpx Headers seen only through their public API."""

    def __init__(self, headers: httpx.Headers) -> None:
        self.raw, self._items = headers.raw, headers.multi_items()

    def multi_items(self) -> list[tuple[str, str]]:
        return self._items


class _PublicURL:
    """An httpx URL seen only through its public API."""

    def __init__(self, url: httpx.URL) -> None:
        self.host, self.port, self.scheme, self._text = url.host, url.port, url.scheme, str(url)

    def __str__(self) -> str:
        return self._text


# --- explaining a miss ---------------------------------------------------------------------

MESSAGES_URL = "https://api.example.test/v1/messages"
JSON = (("content-type", "application/json"),)
MATCHER = Matcher(ignore=DEFAULT_IGNORE_HEADERS, secret=frozenset())


def message(**fields: object) -> bytes:
    body = {"model": "m-1", "max_tokens": 64, "temperature": 0.0, "messages": []}
    body.update(fields)
    return json.dumps(body).encode()


def post(
    body: bytes, headers: tuple[tuple[str, str], ...] = JSON, url: str = MESSAGES_URL
) -> Exchange:
    return Exchange("POST", url, headers=headers, body=body)


def request(body: bytes, headers: tuple[tuple[str, str], ...] = JSON) -> RequestData:
    return RequestData("POST", MESSAGES_URL, headers, body, "api.example.test", 443)


def nearest(req: RequestData, exchanges: list[Exchange]) -> list[int]:
    return [index + 1 for index, _, _ in explain_miss(req, exchanges, MATCHER)]


CHAT = [{"role": "user", "content": f"question {n}: " + "words " * 20} for n in range(8)]


def test_the_exchange_differing_only_in_temperature_comes_first() -> None:
    # Regression: every differing body counted the same, so #1-#3 were listed for a request
    # that differs from #8 only in its temperature.
    exchanges = [post(message(messages=[CHAT[n]], model=f"m-{n}")) for n in range(3)]
    exchanges += [Exchange("GET", f"https://api.example.test/v1/models/{n}") for n in range(4)]
    exchanges.append(post(message(messages=CHAT[:4])))  # #8
    assert nearest(request(message(messages=CHAT[:4], temperature=0.7)), exchanges)[0] == 8


def test_fewer_differing_parts_rank_before_a_closer_body() -> None:
    same_body_other_header = post(message(), (*JSON, ("x-trace", "1"), ("x-user", "a")))
    other_body = post(message(temperature=0.5))
    same_everything_else = post(message(max_tokens=1), (*JSON, ("x-user", "a")))
    exchanges = [same_body_other_header, other_body, same_everything_else]
    # #2 differs in one part (the body); #3 in two (header, body); #1 in two headers.
    assert nearest(request(message()), exchanges) == [2, 1, 3]


def test_method_and_path_first() -> None:
    exchanges = [
        Exchange("GET", MESSAGES_URL, headers=JSON, body=message()),
        post(message(), url="https://api.example.test/v1/other"),
        post(message(model="x", max_tokens=1, temperature=1.0)),
    ]
    assert nearest(request(message()), exchanges)[0] == 3


# --- a miss is explained after the rules, on both sides ------------------------------------


def explained(req: RequestData, exchanges: list[Exchange], matcher: Matcher) -> str:
    return "\n".join(
        line for _, _, diffs in explain_miss(req, exchanges, matcher) for line in diffs
    )


def ruled(rules: Rules) -> Matcher:
    return Matcher(ignore=DEFAULT_IGNORE_HEADERS, secret=frozenset(), rules=rules)


def test_an_ignored_json_field_is_never_shown_as_a_difference() -> None:
    recorded = post(message(q="ada", metadata={"user_id": "u1"}))
    live = request(message(q="bob", metadata={"user_id": "u2"}))
    text = explained(live, [recorded], ruled(Rules(ignore_json=["metadata.user_id"])))
    assert '"q": "bob"' in text  # what still differs is shown
    assert "u1" not in text and "u2" not in text
    assert "metadata.user_id" not in text  # nor suggested again


def test_a_scrubbed_json_field_is_never_shown_as_a_difference() -> None:
    # As written: the recording holds the placeholder, the live request the real value.
    recorded = post(message(q="ada", metadata={"user_id": "<scrubbed>"}))
    live = request(message(q="bob", metadata={"user_id": "ada@mail.example"}))
    text = explained(live, [recorded], ruled(Rules(scrub=[Scrub.json("metadata.user_id")])))
    assert '"q": "bob"' in text
    assert "ada@mail.example" not in text
    assert "metadata.user_id" not in text


def test_an_ignored_query_parameter_is_never_suggested_again() -> None:
    url = "https://api.example.test/v1/items"
    recorded = Exchange("GET", f"{url}?q=ada&ts=1700000000")
    live = RequestData("GET", f"{url}?q=bob&ts=1800000000", (), b"", "api.example.test", 443)
    text = explained(live, [recorded], ruled(Rules(ignore_query=["ts"])))
    assert f"url: request {url}?q=bob, recorded {url}?q=ada" in text
    assert "ts=" not in text and '"ts"' not in text


def test_a_url_differing_only_in_a_hidden_value_says_which_parameter() -> None:
    # `session` is matched, but its value has a credential's shape, so the url line hides it:
    # both sides then print alike, and the line must still say what differs.
    url = "https://api.example.test/v1/items"
    recorded = Exchange("GET", f"{url}?session=ab12cd34ef")
    live = RequestData("GET", f"{url}?session=zz99yy88xx", (), b"", "api.example.test", 443)
    text = explained(live, [recorded], ruled(Rules()))
    assert "(the hidden value of query parameter `session` differs)" in text
    assert "ab12cd34ef" not in text and "zz99yy88xx" not in text


def test_a_header_scrubbed_by_a_regex_is_never_shown_as_a_difference() -> None:
    rules = Rules(scrub=[Scrub.regex(r"[\w.]+@[\w.]+", "<email>")])
    recorded = post(message(q="ada"), (*JSON, ("x-user", "<email>")))
    live = request(message(q="bob"), (*JSON, ("x-user", "grace@mail.example")))
    text = explained(live, [recorded], ruled(rules))
    assert "x-user" not in text
    assert "grace@mail.example" not in text
    assert '"q": "bob"' in text


# --- hints: a rule only for what looks like a per-run value --------------------------------


def hint(
    recorded: list[Exchange],
    live: RequestData,
    matcher: Matcher = MATCHER,
    advice: Advice | None = None,
) -> str:
    """The lines of a miss that are not a difference: what to do about it."""
    advice = PytestAdvice() if advice is None else advice
    explanation = explain_miss(live, recorded, matcher, advice=advice)
    lines = explanation[0][2]
    return "\n".join(line for line in lines if not line.startswith((" ", "body differs")))


UUID_A, UUID_B = "0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"


@pytest.mark.parametrize(
    ("was", "now", "looks"),
    [
        (UUID_A, UUID_B, "a UUID"),
        ("toolu_01A09q90qw90lq917835lq9", "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "an id"),
        ("call_8hVh4kD3ZsXb1Q9L2mN0pA", "call_Qm2Lp9aZ7yX4cV1bN8sD3fG", "an id"),
        ("req_011CQ2z4JjPK7wEh2Qz1Xy9A", "req_011CQ5BXUhJ9Ye1TnBm6kYzL", "an id"),
        ("msg_01XFDUDYJgAACzvnptvVoYEL", "msg_01AbCdEfGhIjKlMnOpQrStUv", "an id"),
        ("9f86d081884c7d659a2feaa0c55ad015", "a3b1c2d4e5f60718293a4b5c6d7e8f90", "a hex value"),
        ("dGhpcyBpcyBhIG5vbmNlIDEyMzQ1Njc4OTA=", "YW5vdGhlciBub25jZSAwOTg3NjU0MzIx", "a token"),
        (1700000000, 1800000123, "a timestamp"),
        (1700000000123, 1800000000456, "a timestamp"),
        ("2024-05-01T10:00:00Z", "2026-11-30T12:34:56.789+01:00", "a timestamp"),
        ("2024-05-01", "2026-11-30", "a date"),
        ("Mon, 30 Nov 2026 12:00:00 GMT", "Tue, 01 Dec 2026 08:00:00 GMT", "a date"),
    ],
    ids=[
        "uuid", "toolu", "call", "req", "msg", "hex", "base64", "epoch", "epoch-ms", "iso", "date",
        "http-date",
    ],
)  # fmt: skip
def test_a_per_run_value_gets_the_rule_that_ignores_it(
    was: object, now: object, looks: str
) -> None:
    text = hint([post(message(metadata={"run": was}))], request(message(metadata={"run": now})))
    assert f"only `metadata.run` differs, and it looks like a per-run value ({looks}); " in text
    assert 'ignore it with Rules(ignore_json=["metadata.run"])' in text
    assert "--record-all" not in text


@pytest.mark.parametrize(
    ("recorded", "sent", "named"),
    [
        # A changed prompt, system text, setting, model or tool list is the request changing.
        (message(messages=[CHAT[0]]), message(messages=[CHAT[1]]), "`messages[0].content`"),
        (message(system="Be brief."), message(system="Be very brief."), "`system`"),
        (message(max_tokens=64), message(max_tokens=1024), "`max_tokens`"),
        (message(model="m-1"), message(model="m-2"), "`model`"),
        (message(tools=[{"name": "a"}]), message(tools=[{"name": "a"}, {"name": "b"}]), "`tools`"),
        (message(metadata={"user_id": "u1"}), message(metadata={"user_id": "u2"}), "`metadata"),
        # The second turn of a tool loop: the conversation grew.
        (message(messages=CHAT[:1]), message(messages=CHAT[:3]), "`messages`"),
        # Even an id-shaped prompt is a prompt.
        (message(prompt=UUID_A), message(prompt=UUID_B), "`prompt`"),
    ],
    ids=["prompt", "system", "setting", "model", "tools", "user-id", "tool-loop", "prompt-id"],
)
def test_a_changed_request_is_never_told_to_ignore_it(
    recorded: bytes, sent: bytes, named: str
) -> None:
    text = hint([post(recorded)], request(sent))
    assert "Rules(" not in text and "ignore" not in text
    assert f"the request changed: {named}" in text
    assert "re-record with `pytest --record --prune` (or `pytest --record-all`)" in text


def test_the_re_record_command_is_the_front_ends() -> None:
    recorded, live = [post(message(max_tokens=64))], request(message(max_tokens=1024))
    assert 're-record with mode="all"' in hint(recorded, live, advice=Advice())


def test_a_whole_body_that_changed_is_named_and_never_ignored() -> None:
    text_headers = (("content-type", "text/plain"),)
    recorded = [post(b"hello there", text_headers)]
    text = hint(recorded, request(b"hello world", text_headers))
    assert "the request changed: the body" in text
    assert "ignore" not in text


def test_query_parameters_follow_the_same_rule() -> None:
    url = "https://api.example.test/v1/items"

    def get(query: str) -> RequestData:
        return RequestData("GET", f"{url}?{query}", (), b"", "api.example.test", 443)

    changed = hint([Exchange("GET", f"{url}?q=ada")], get("q=bob"))
    assert "the request changed: query parameter `q`" in changed
    assert "ignore_query" not in changed
    nonce = hint(
        [Exchange("GET", f"{url}?q=ada&n=9f86d081884c7d65")], get("q=ada&n=a3b1c2d4e5f60718")
    )
    assert 'ignore it with Rules(ignore_query=["n"])' in nonce
    # A parameter named as a timestamp or nonce is one, whatever its value looks like.
    stamp = hint([Exchange("GET", f"{url}?q=ada&ts=1")], get("q=ada&ts=2"))
    assert 'ignore it with Rules(ignore_query=["ts"])' in stamp


def test_headers_follow_the_same_rule() -> None:
    recorded = [post(message(), (*JSON, ("x-trace-ref", UUID_A), ("x-tenant", "blue")))]
    text = hint(
        recorded, request(message(), (*JSON, ("x-trace-ref", UUID_B), ("x-tenant", "green")))
    )
    assert "header `x-trace-ref` looks like a per-run value (a UUID)" in text
    assert 'Rules(ignore_headers=["x-trace-ref"])' in text
    assert "the request changed: header `x-tenant`" in text


def test_a_value_new_in_every_recorded_exchange_is_per_run() -> None:
    # Short tokens are not shaped like ids, but the recording shows them changing on every call.
    recorded = [post(message(session={"seq": token})) for token in ("k3v9x1", "p2m8z4")]
    text = hint(recorded, request(message(session={"seq": "q7w1e5"})))
    assert "differs in every recorded exchange" in text
    assert 'Rules(ignore_json=["session.seq"])' in text


def test_pages_are_not_per_run_values() -> None:
    url = "https://api.example.test/v1/items"
    recorded = [Exchange("GET", f"{url}?page={n}") for n in (1, 2)]
    text = hint(recorded, RequestData("GET", f"{url}?page=3", (), b"", "api.example.test", 443))
    assert "ignore" not in text
    assert "the request changed: query parameter `page`" in text


# --- the API version header ----------------------------------------------------------------


def test_a_changed_api_version_names_the_sdk_upgrade() -> None:
    was = (*JSON, ("anthropic-version", "2023-06-01"))
    text = hint(
        [post(message(), was)], request(message(), (*JSON, ("anthropic-version", "2026-10-21")))
    )
    assert "it is the API version the Anthropic SDK asks for" in text
    assert 'default_headers={"anthropic-version": "2023-06-01"}' in text


def test_a_recording_without_the_version_header_says_so() -> None:
    text = hint([post(message())], request(message(), (*JSON, ("anthropic-version", "2023-06-01"))))
    assert "the cassette was recorded without anthropic-version" in text
    assert "(filtered out, or converted from another tool)" in text
    assert "default_headers" not in text
    assert "SDK upgrade" not in text
    assert "re-record with `pytest --record --prune` (or `pytest --record-all`)" in text


# --- which recorded exchanges are the nearest ----------------------------------------------

QUESTIONS = [
    "What is the capital of France, and how many people live there?",
    "How many legs does a spider have, and why do they need so many?",
    "What is the boiling point of water at sea level, in degrees Celsius?",
    "Who wrote the novel Pride and Prejudice, and in which year was it published?",
    "How far is the Moon from the Earth on average, in kilometres?",
]


def asking(question: str) -> bytes:
    return message(messages=[{"role": "user", "content": question}])


def test_a_small_edit_of_one_recorded_question_ranks_that_question_first() -> None:
    exchanges = [post(asking(q)) for q in QUESTIONS]
    edited = QUESTIONS[3].replace("which year", "what year")
    assert nearest(request(asking(edited)), exchanges)[0] == 4
    # Anywhere in a long conversation, too: the part that differs is what is compared.
    history = [{"role": "user", "content": "context " * 400}] * 3
    long = [post(message(messages=[*history, {"role": "user", "content": q}])) for q in QUESTIONS]
    live = request(message(messages=[*history, {"role": "user", "content": edited}]))
    assert nearest(live, long)[0] == 4


def test_the_same_method_and_path_rank_first_and_other_urls_only_when_none_shares_it() -> None:
    exchanges = [
        Exchange("GET", MESSAGES_URL, headers=JSON),  # the path, another method
        post(message(), url="https://api.example.test/v1/other"),  # another path
        post(message(model="x", max_tokens=1, temperature=1.0)),  # the method and path
        Exchange("GET", "https://api.example.test/v1/models"),
    ]
    assert nearest(request(message()), exchanges) == [3, 1]
    # Nothing shares the path: the other URLs are the nearest there are.
    elsewhere = [exchanges[1], exchanges[3]]
    assert nearest(request(message()), elsewhere) == [1, 2]


def test_fewer_differing_parts_still_rank_before_closer_values() -> None:
    close_but_two_parts = post(asking(QUESTIONS[0] + "!"), (*JSON, ("x-user", "a")))
    far_but_one_part = post(asking(QUESTIONS[2]))
    assert nearest(request(asking(QUESTIONS[0])), [close_but_two_parts, far_but_one_part]) == [2, 1]


def test_a_body_nested_too_deep_to_walk_is_still_explained() -> None:
    def nested(leaf: str) -> bytes:
        return ("[" * 1000 + f'"{leaf}"' + "]" * 1000).encode()

    text = hint([post(nested("a"))], request(nested("b")))
    assert "the request changed: the body differs" in text


# --- which headers take part ---------------------------------------------------------------

HOP_BY_HOP = [
    "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    "proxy-connection", "http2-settings",
]  # fmt: skip


def test_hop_by_hop_headers_are_never_matched() -> None:
    # Not even when the volatile set is emptied (ignore_headers=[] on the transport).
    matcher = Matcher(ignore=frozenset(), secret=frozenset())
    headers = (*((name, "x") for name in HOP_BY_HOP), ("accept", "*/*"))
    assert matcher.ordinary_headers(headers) == (("accept", "*/*"),)


def test_headers_listed_in_connection_are_never_matched() -> None:
    matcher = Matcher(ignore=frozenset(), secret=frozenset())
    sent = (("connection", "keep-alive, X-Hop , x-other"), ("x-hop", "1"), ("x-other", "2"))
    assert matcher.ordinary_headers((*sent, ("x-kept", "3"))) == (("x-kept", "3"),)


def test_header_rules_are_names_or_patterns_added_to_the_volatile_set() -> None:
    matcher = Matcher(
        ignore=DEFAULT_IGNORE_HEADERS,
        secret=frozenset(),
        rules=Rules(ignore_headers=["x-run", "x-*-id", "*-trace"]),
    )
    headers = (
        ("user-agent", "u"), ("x-run", "1"), ("x-request-id", "2"), ("b3-trace", "3"),
        ("x-id", "4"), ("x-running", "5"),
    )  # fmt: skip
    assert matcher.ordinary_headers(headers) == (("x-id", "4"), ("x-running", "5"))
    everything = Matcher(ignore=frozenset(), secret=frozenset(), rules=Rules(ignore_headers=["*"]))
    assert everything.ordinary_headers(headers) == ()


def test_equal_matchers_are_one_key_of_the_session_index() -> None:
    # Users of one cassette whose matching agrees share an index (the session keys its indexes
    # by `Matcher`); anything that changes matching makes another.
    def made(**changes: object) -> Matcher:
        options: dict[str, object] = {"ignore": DEFAULT_IGNORE_HEADERS, "secret": frozenset()}
        return Matcher(**{**options, **changes})  # type: ignore[arg-type]

    assert made() == made() and hash(made()) == hash(made())
    assert made(rules=Rules(ignore_query=["t"])) == made(rules=Rules(ignore_query=("t",)))
    others = [
        made(ignore=frozenset()),
        made(secret=frozenset({"x-key"})),
        made(secret_query=frozenset({"key"})),
        made(rules=Rules(ignore_body=True)),
    ]
    assert all(other != made() for other in others)
    assert len({made(), *others}) == 5
    assert repr(made(ignore=frozenset())) == (
        "Matcher(ignore=frozenset(), secret=frozenset(), secret_query=frozenset(), "
        f"rules={Rules()!r})"
    )


# --- match keys, directly (issue 29 item 9) -----------------------------------------------------
#
# A request and a recorded exchange match when their keys are equal.  Each test below changes
# one part of one request and nothing else, so a key that lost a part is caught by its own test.

KEY_URL = "https://api.example.test/v1/items?page=2"
KEY_HEADERS = (("content-type", "application/json"), ("x-team", "blue"))
KEY_BODY = b'{"query": "sakura", "limit": 10}'


def keyed(
    method: str = "POST",
    url: str = KEY_URL,
    headers: tuple[tuple[str, str], ...] = KEY_HEADERS,
    body: bytes = KEY_BODY,
    **options: object,
) -> tuple[object, ...]:
    settings: dict[str, object] = {"ignore": DEFAULT_IGNORE_HEADERS, "secret": frozenset()}
    matcher = Matcher(**{**settings, **options})  # type: ignore[arg-type]
    return matcher.key(method, url, headers, body)


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"method": "PUT"}, id="method"),
        pytest.param({"url": "https://api.example.test/v1/items?page=3"}, id="query value"),
        pytest.param({"url": "https://api.example.test/v2/items?page=2"}, id="path"),
        pytest.param({"url": "https://other.example.test/v1/items?page=2"}, id="host"),
        pytest.param({"url": "http://api.example.test/v1/items?page=2"}, id="scheme"),
        pytest.param({"headers": (*KEY_HEADERS[:1], ("x-team", "red"))}, id="header value"),
        pytest.param({"headers": (*KEY_HEADERS, ("x-extra", "1"))}, id="header added"),
        pytest.param({"headers": KEY_HEADERS[:1]}, id="header removed"),
        pytest.param({"body": b'{"query": "sakura", "limit": 11}'}, id="body"),
        pytest.param({"body": b""}, id="body removed"),
    ],
)
def test_a_change_to_one_part_changes_the_key(changed: dict[str, object]) -> None:
    assert keyed(**changed) != keyed()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "same",
    [
        pytest.param({"method": "post"}, id="method case"),
        pytest.param({"url": "HTTPS://API.Example.TEST:443/v1/items?page=2"}, id="url spelling"),
        pytest.param({"headers": KEY_HEADERS[::-1]}, id="header order"),
        pytest.param({"headers": (*KEY_HEADERS, ("user-agent", "x/2"))}, id="volatile header"),
        pytest.param({"headers": (*KEY_HEADERS, ("keep-alive", "5"))}, id="hop-by-hop header"),
        pytest.param(
            {"headers": (*KEY_HEADERS, ("connection", "x-hop"), ("x-hop", "1"))},
            id="header the connection names",
        ),
        pytest.param({"body": b'{"limit":10,"query":"sakura"}'}, id="json key order"),
    ],
)
def test_what_matching_ignores_leaves_the_key_alone(same: dict[str, object]) -> None:
    assert keyed(**same) == keyed()  # type: ignore[arg-type]


def test_a_secret_header_or_query_value_is_not_in_the_key() -> None:
    secret = frozenset({"x-api-key"})
    with_key = (*KEY_HEADERS, ("x-api-key", "one"))
    other_key = (*KEY_HEADERS, ("x-api-key", "two"))
    assert keyed(headers=with_key, secret=secret) == keyed(headers=other_key, secret=secret)
    assert keyed(headers=with_key) != keyed(headers=other_key)  # not declared: compared
    query = frozenset({"sig"})
    one, two = f"{KEY_URL}&sig=aaaa", f"{KEY_URL}&sig=bbbb"
    assert keyed(url=one, secret_query=query) == keyed(url=two, secret_query=query)
    assert keyed(url=one) != keyed(url=two)


def test_the_rules_leave_their_parts_out_of_the_key() -> None:
    rules = Rules(ignore_query=["page"], ignore_json=["limit"], ignore_headers=["x-te*"])
    changed = {
        "url": "https://api.example.test/v1/items?page=9",
        "headers": (*KEY_HEADERS[:1], ("x-team", "red")),
        "body": b'{"query": "sakura", "limit": 99}',
    }
    assert keyed(**changed, rules=rules) == keyed(rules=rules)  # type: ignore[arg-type]
    assert keyed(body=b'{"query": "other"}', rules=rules) != keyed(rules=rules)
    loose = Rules(ignore_body=True)
    assert keyed(body=b"anything", rules=loose) == keyed(rules=loose)


def test_a_multipart_boundary_is_not_in_the_key() -> None:
    def form(boundary: str) -> tuple[object, ...]:
        headers = (("content-type", f"multipart/form-data; boundary={boundary}"),)
        body = f'--{boundary}\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n'
        return keyed(headers=headers, body=f"{body}--{boundary}--\r\n".encode())

    assert form("aaaa1111") == form("bbbb2222")


def test_a_request_and_its_recorded_exchange_have_one_key() -> None:
    matcher = Matcher(ignore=DEFAULT_IGNORE_HEADERS, secret=frozenset())
    request = httpx.Request(
        "POST", KEY_URL, headers=dict(KEY_HEADERS), content=KEY_BODY
    )  # what the code under test sends
    data = library_of(request).request_data(request)
    exchange = Exchange("POST", data.url, headers=data.headers, body=KEY_BODY)  # as recorded
    assert matcher.key_of_request(data) == matcher.key_of_exchange(exchange)
    assert matcher.key_of_request(data._replace(body=b"{}")) != matcher.key_of_exchange(exchange)
    assert isinstance(data, RequestData)
