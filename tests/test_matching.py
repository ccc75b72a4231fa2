"""Explaining a miss (`sakura_http._matching.explain_miss`): which recorded exchanges are
named as the nearest, and in which order."""

from __future__ import annotations

import json

from sakura_http._format import Exchange
from sakura_http._matching import DEFAULT_IGNORE_HEADERS, MatchRules, RequestData, explain_miss

URL = "https://api.example.test/v1/messages"
JSON = (("content-type", "application/json"),)
RULES = MatchRules(ignore=DEFAULT_IGNORE_HEADERS, secret=frozenset())


def message(**fields: object) -> bytes:
    body = {"model": "m-1", "max_tokens": 64, "temperature": 0.0, "messages": []}
    body.update(fields)
    return json.dumps(body).encode()


def post(body: bytes, headers: tuple[tuple[str, str], ...] = JSON, url: str = URL) -> Exchange:
    return Exchange("POST", url, headers=headers, body=body)


def request(body: bytes, headers: tuple[tuple[str, str], ...] = JSON) -> RequestData:
    return RequestData("POST", URL, headers, body, "api.example.test", 443)


def nearest(req: RequestData, exchanges: list[Exchange]) -> list[int]:
    return [index + 1 for index, _, _ in explain_miss(req, exchanges, RULES)]


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
        Exchange("GET", URL, headers=JSON, body=message()),
        post(message(), url="https://api.example.test/v1/other"),
        post(message(model="x", max_tokens=1, temperature=1.0)),
    ]
    assert nearest(request(message()), exchanges)[0] == 3
