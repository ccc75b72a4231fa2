"""`Value`: its shared `__eq__`, `__hash__` and `__repr__` behave as `@dataclass` generates them.

Every dataclass that derives from `Value` is compared with a twin: a class with the same fields
(and the same `compare`, `hash` and `repr` flags) whose methods `@dataclass` generates, holding
the same field values.  Equality between any two samples, hashes and reprs must agree.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import sys
from typing import Any

import pytest

import sakura_http
from sakura_http import (
    CassetteConfig,
    Exchange,
    FaultInfo,
    JsonPath,
    RecordMode,
    Rules,
    Scrub,
)
from sakura_http._format import CassetteContent
from sakura_http._matching import Matcher
from sakura_http._value import Value
from sakura_http.llm._clients import _Sdk

EXCHANGE = Exchange("GET", "https://api.example.test/v1", (("accept", "*/*"),), b"", 200)
FAULT = FaultInfo("ConnectError", "refused")
NAN = float("nan")  # one object, in a field of two values: equal before Python 3.13, not since

# Samples of each class: equal ones that are not the same object, and ones that differ in each
# field (`replace`), so every field's part in ==, hash() and repr() is seen.
SAMPLES: dict[type, list[Any]] = {
    FaultInfo: [
        FAULT,
        FaultInfo("ConnectError", "refused"),
        FaultInfo("ReadTimeout", "refused"),
        FaultInfo(NAN, "refused"),  # type: ignore[arg-type]
        FaultInfo(NAN, "refused"),  # type: ignore[arg-type]
    ],
    Exchange: [
        EXCHANGE,
        Exchange("GET", "https://api.example.test/v1", (("accept", "*/*"),), b"", 200),
        *(
            dataclasses.replace(EXCHANGE, **{name: value})
            for name, value in {
                "method": "POST",
                "url": "https://api.example.test/v2",
                "headers": (),
                "body": b"{}",
                "status": 404,
                "response_headers": (("content-type", "text/plain"),),
                "response_body": b"ok",
                "error": FAULT,
                "id": "one",
                "chunks": (),
                "truncated": True,
                "timings_ms": (float("nan"),),
                "response_header_charset": "latin-1",
                "extra": {"note": [1]},
            }.items()
        ),
    ],
    CassetteContent: [
        CassetteContent({"kind": "cassette"}, [EXCHANGE], [2]),
        CassetteContent({"kind": "cassette"}, [EXCHANGE], [2]),
        CassetteContent({}, [], []),
    ],
    JsonPath: [JsonPath.parse("a.b[0]"), JsonPath.parse("a.b[0]"), JsonPath.parse("a[*]")],
    Scrub: [Scrub.json("a.b"), Scrub.json("a.b"), Scrub.regex("x+"), Scrub.query("key")],
    Rules: [
        Rules(),
        Rules(),
        Rules(ignore_query=["t"]),
        Rules(ignore_json=["a"], ignore_body=True, scrub=[Scrub.query("key")]),
        Rules(before_record=print),
    ],
    CassetteConfig: [
        CassetteConfig(),
        CassetteConfig(),
        CassetteConfig(mode=RecordMode.ALL),
        CassetteConfig(secret_headers=["x-key"], replay_latency=1),
        CassetteConfig(rules=Rules(ignore_body=True)),
    ],
    Matcher: [
        Matcher(frozenset({"date"}), frozenset()),
        Matcher(frozenset({"date"}), frozenset()),
        Matcher(frozenset({"date"}), frozenset({"x-key"})),
        Matcher(frozenset(), frozenset(), frozenset({"key"}), Rules(ignore_body=True)),
    ],
    _Sdk: [
        _Sdk("anthropic", "Anthropic", "AsyncAnthropic", ("api_key",)),
        _Sdk("anthropic", "Anthropic", "AsyncAnthropic", ("api_key",)),
        _Sdk("openai", "OpenAI", "AsyncOpenAI", ()),
    ],
}


def generated(cls: type) -> type:
    """A class with the fields of `cls` whose ==, hash() and repr() `@dataclass` generates."""
    fields = [
        (f.name, Any, dataclasses.field(compare=f.compare, hash=f.hash, repr=f.repr))
        for f in dataclasses.fields(cls)
    ]
    frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    twin = dataclasses.make_dataclass(cls.__name__, fields, frozen=frozen, eq=True, repr=True)
    twin.__qualname__ = cls.__qualname__
    return twin


def twin_of(twin: type, value: Any) -> Any:
    copy = object.__new__(twin)
    for f in dataclasses.fields(twin):
        object.__setattr__(copy, f.name, getattr(value, f.name))
    return copy


def hashed(value: Any) -> Any:
    try:
        return hash(value)
    except TypeError as exc:  # unhashable, both ways
        return str(exc)


@pytest.mark.parametrize("cls", SAMPLES, ids=lambda cls: cls.__name__)
def test_eq_hash_and_repr_are_those_dataclass_generates(cls: type) -> None:
    twin = generated(cls)
    samples = SAMPLES[cls]
    twins = [twin_of(twin, sample) for sample in samples]
    for a, ta in zip(samples, twins, strict=True):
        for b, tb in zip(samples, twins, strict=True):
            assert (a == b) is (ta == tb), (a, b)
            assert (a != b) is (ta != tb), (a, b)
        assert a.__eq__(object()) is NotImplemented
        assert a != twin_of(twin, a)  # another class: never equal, as generated
        assert a != twin_of(type("Sub", (cls,), {"__slots__": ()}), a)  # nor a subclass
        if "__hash__" not in cls.__dict__:
            assert hashed(a) == hashed(ta)
        if "__repr__" not in cls.__dict__:
            assert repr(a) == repr(ta)
    assert samples[0] == samples[1] and samples[0] is not samples[1]
    assert not all(a == samples[0] for a in samples)


def test_a_value_that_holds_itself_shows_dots_as_dataclass_does() -> None:
    content = CassetteContent({}, [], [])
    content.exchanges.append(content)  # type: ignore[arg-type]
    assert repr(content) == "CassetteContent(header={}, exchanges=[...], line_numbers=[])"
    twin = generated(CassetteContent)
    looped = twin_of(twin, CassetteContent({}, [], []))
    looped.exchanges.append(looped)
    assert repr(content) == repr(looped)


def test_every_dataclass_on_the_import_path_uses_value() -> None:
    # The classes `import sakura_http` and its plugin define: none has its methods compiled.
    # (A module only a command imports, such as `_drift` for `sakura-http verify`, is not on
    # the import path.)
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sakura_http, sakura_http.pytest_plugin; "
            "print(' '.join(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    modules = [
        importlib.import_module(f"sakura_http.{info.name}")
        for info in pkgutil.iter_modules(sakura_http.__path__)
        if info.name.startswith("_")
        and not info.name.startswith("__")
        and f"sakura_http.{info.name}" in imported
    ]
    modules.append(importlib.import_module("sakura_http.llm._clients"))
    found = {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == module.__name__
    }
    assert found == set(SAMPLES)
    for cls in found:
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert issubclass(cls, Value) and not params.eq and not params.repr, cls
