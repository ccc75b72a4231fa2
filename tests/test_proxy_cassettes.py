"""A cassette folder (``--cassette-dir``, `serve(cassette_dir=...)`): in forward mode, one cassette
per upstream origin, each its own session, recorded and replayed by clients on 127.0.0.1."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path

import httpx
import pytest

from sakura_http import ConfigurationError
from sakura_http.proxy import serve, start
from sakura_http.proxy._cassettes import cassette_name
from tests.proxy_support import HANG_GUARD, start_upstream


def urls(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()[1:]]


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://api.example.com/v1", "api.example.com.jsonl"),
        ("http://api.example.com:80/v1", "api.example.com.jsonl"),
        ("https://api.example.com:8443/v1", "api.example.com_8443.jsonl"),
        ("http://127.0.0.1:5000/", "127.0.0.1_5000.jsonl"),
        ("http://[::1]:5000/", "__1_5000.jsonl"),
    ],
)
def test_one_file_name_per_origin(url: str, name: str) -> None:
    assert cassette_name(httpx.URL(url)) == name


def test_each_origin_records_and_replays_in_its_own_cassette(tmp_path: Path) -> None:
    folder = tmp_path / "cassettes"
    ca_dir = tmp_path / "ca"
    with (
        start_upstream() as plain,
        start_upstream(tls=True, folder=tmp_path) as secure,
    ):
        paths = [f"{plain.url}/v1/a", f"{secure.url}/v1/b", f"{plain.url}/v1/c"]
        with serve(
            cassette_dir=folder, mode="new_episodes", ca_dir=ca_dir, verify=secure.ca_file
        ) as proxy:
            assert proxy.ca_cert is not None
            with httpx.Client(
                proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert)
            ) as http:
                live = [http.get(url).json() for url in paths]
            assert proxy.appended == 3
            assert proxy.path == str(folder)
    plain_file = folder / f"127.0.0.1_{plain.port}.jsonl"
    secure_file = folder / f"127.0.0.1_{secure.port}.jsonl"
    assert sorted(folder.iterdir()) == sorted([plain_file, secure_file])
    assert urls(plain_file) == [paths[0], paths[2]]
    assert urls(secure_file) == [paths[1]]

    # Offline, mode none: each request is answered from its origin's cassette.
    with serve(cassette_dir=folder, ca_dir=ca_dir) as proxy:
        assert proxy.ca_cert is not None
        with httpx.Client(
            proxy=proxy.url, verify=ssl.create_default_context(cafile=proxy.ca_cert)
        ) as http:
            assert [http.get(url).json() for url in reversed(paths)] == live[::-1]
            missed = http.get("http://127.0.0.1:9/v1/none")
        assert proxy.unplayed() == []
    assert missed.status_code == 502 and missed.headers["x-sakura-http-error"] == "miss"
    assert str(folder / "127.0.0.1_9.jsonl") in missed.text
    assert not (folder / "127.0.0.1_9.jsonl").exists()  # mode none writes nothing


def test_mode_all_replaces_each_cassette_on_a_clean_stop(tmp_path: Path) -> None:
    folder = tmp_path / "cassettes"
    with start_upstream() as upstream:
        with serve(cassette_dir=folder, mode="new_episodes", ca_dir=tmp_path / "ca") as proxy:
            httpx.get(f"{upstream.url}/v1/old", proxy=proxy.url, timeout=HANG_GUARD)
        with serve(cassette_dir=folder, mode="all", ca_dir=tmp_path / "ca") as proxy:
            httpx.get(f"{upstream.url}/v1/new", proxy=proxy.url, timeout=HANG_GUARD)
    assert urls(folder / f"127.0.0.1_{upstream.port}.jsonl") == [f"{upstream.url}/v1/new"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give the proxy one cassette, or a cassette folder"),
        ({"cassette": "a.jsonl", "cassette_dir": "c"}, "not both"),
        (
            {"cassette_dir": "c", "upstream": "https://api.example"},
            "cassette_dir (--cassette-dir) keeps one cassette per upstream origin",
        ),
    ],
)
def test_one_cassette_or_one_folder(tmp_path: Path, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        start(**kwargs, ca_dir=tmp_path / "ca")  # type: ignore[arg-type]
