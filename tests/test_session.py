"""One session per cassette per process: shared play order, one re-recording, finished by the
last user; a run that fails keeps the old cassette."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from sakura_http import (
    DEFAULT_IGNORE_HEADERS,
    CassetteMiss,
    ConfigurationError,
    RecordingTransport,
    _cassette,
)
from sakura_http._cassette import locked
from sakura_http._session import CassetteSession

URL = "https://api.example.test/job"
HEADER = b'{"schema_version":"1.0","kind":"cassette"}\n'


def exchange(text: str, url: str = URL) -> bytes:
    return (
        json.dumps(
            {
                "method": "GET",
                "url": url,
                "headers": [["accept", "*/*"]],
                "body": "",
                "status": 200,
                "response_headers": [],
                "response_body": text,
            }
        ).encode()
        + b"\n"
    )


def urls(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_bytes().splitlines()[1:]]


def counter() -> httpx.MockTransport:
    sent: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(200, text=f"live {len(sent)}")

    return httpx.MockTransport(answer)


def test_transports_on_one_cassette_share_the_play_order(tmp_path: Path) -> None:
    path = tmp_path / "poll.jsonl"
    path.write_bytes(HEADER + exchange("pending") + exchange("done"))
    first, second = RecordingTransport(path), RecordingTransport(path)
    assert httpx.Client(transport=first).get(URL).text == "pending"
    assert httpx.Client(transport=second).get(URL).text == "done"
    assert first.unplayed() == second.unplayed() == []
    first.close()
    second.close()
    # The last user closed: the next transport starts a new session from the beginning.
    with RecordingTransport(path) as again:
        assert httpx.Client(transport=again).get(URL).text == "pending"


def test_the_same_file_by_another_name_is_the_same_session(tmp_path: Path) -> None:
    path = tmp_path / "poll.jsonl"
    path.write_bytes(HEADER + exchange("pending") + exchange("done"))
    (tmp_path / "link.jsonl").symlink_to(path)
    with RecordingTransport(path) as a, RecordingTransport(tmp_path / "link.jsonl") as b:
        assert httpx.Client(transport=a).get(URL).text == "pending"
        assert httpx.Client(transport=b).get(URL).text == "done"


def test_two_rerecording_transports_write_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    path.write_bytes(HEADER + exchange("old"))
    outer = counter()
    first = RecordingTransport(path, outer=outer, mode="all")
    second = RecordingTransport(path, outer=outer, mode="all")
    httpx.Client(transport=first).get(URL + "/1")
    first.close()
    assert urls(path) == [URL]  # the session is still open: nothing replaced yet
    httpx.Client(transport=second).get(URL + "/2")
    second.close()
    assert urls(path) == [URL + "/1", URL + "/2"]


def test_a_new_episodes_user_appends_into_the_rerecording(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    path.write_bytes(HEADER + exchange("old"))
    with RecordingTransport(path, outer=counter(), mode="all") as rerecording:
        httpx.Client(transport=rerecording).get(URL + "/1")
        with pytest.raises(ConfigurationError, match="close the other transport first"):
            RecordingTransport(path, outer=counter(), mode="new_episodes")
    assert urls(path) == [URL + "/1"]


def test_a_rerecording_looks_nothing_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mode all records every request whatever the cassette holds: no match key is computed
    and no index is built (the lookup could not change the answer), yet every request is
    recorded, repeats included, and counted as played."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(HEADER + exchange("old"))

    def no_key(*args: Any) -> Any:
        raise AssertionError("a match key was computed")

    monkeypatch.setattr("sakura_http._matching.Matcher._key", no_key)
    monkeypatch.setattr("sakura_http._matching.Matcher.key", no_key)
    with RecordingTransport(path, outer=counter(), mode="all") as transport:
        client = httpx.Client(transport=transport)
        assert [client.get(URL).text for _ in range(2)] == ["live 1", "live 2"]
        assert transport._user.unplayed() == []
    assert [json.loads(line)["response_body"] for line in path.read_bytes().splitlines()[1:]] == [
        "live 1",
        "live 2",
    ]


def test_replay_and_record_users_share_one_index(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with (
        RecordingTransport(path, outer=counter(), mode="new_episodes") as recorder,
        RecordingTransport(path) as replayer,
    ):
        assert httpx.Client(transport=recorder).get(URL).text == "live 1"
        # The exchange the other user just recorded was played by it: repeated, not missed.
        assert httpx.Client(transport=replayer).get(URL).text == "live 1"
    assert urls(path) == [URL]


def test_users_with_other_matching_rules_get_their_own_index(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(HEADER + exchange("pending") + exchange("done"))
    # "strict" compares x-run, which the recording lacks; "loose" ignores it.
    strict = RecordingTransport(path)
    loose = RecordingTransport(path, ignore_headers=[*DEFAULT_IGNORE_HEADERS, "x-run"])
    assert httpx.Client(transport=loose, headers={"x-run": "7"}).get(URL).text == "pending"
    with pytest.raises(CassetteMiss, match="header x-run: only in the request"):
        httpx.Client(transport=strict, headers={"x-run": "7"}).get(URL)
    # The first exchange was played through the other index: this one gets the second.
    assert httpx.Client(transport=strict).get(URL).text == "done"
    strict.close()
    loose.close()


@pytest.mark.parametrize("use_async", [False, True])
def test_a_block_left_by_an_exception_keeps_the_old_cassette(
    tmp_path: Path, use_async: bool
) -> None:
    path = tmp_path / "c.jsonl"
    old = HEADER + exchange("one") + exchange("two") + exchange("three")
    path.write_bytes(old)

    def run() -> None:
        with RecordingTransport(path, outer=counter(), mode="all") as transport:
            httpx.Client(transport=transport).get(URL)
            raise RuntimeError("the run failed after one of three requests")

    async def arun() -> None:
        async with RecordingTransport(path, outer=counter(), mode="all") as transport:
            await httpx.AsyncClient(transport=transport).get(URL)
            raise RuntimeError("the run failed after one of three requests")

    with pytest.raises(RuntimeError):
        if use_async:
            import anyio

            anyio.run(arun)
        else:
            run()
    assert path.read_bytes() == old
    assert not (tmp_path / "c.jsonl.recording").exists()


def test_a_clean_close_replaces(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(HEADER + exchange("one") + exchange("two"))
    with RecordingTransport(path, outer=counter(), mode="all") as transport:
        httpx.Client(transport=transport).get(URL + "/new")
    assert urls(path) == [URL + "/new"]


def test_an_httpx_client_block_passes_the_failure_on(tmp_path: Path) -> None:
    # httpx.Client.__exit__ hands the exception to the transport's __exit__.
    path = tmp_path / "c.jsonl"
    path.write_bytes(HEADER + exchange("one"))
    before = path.read_bytes()
    transport: Any = RecordingTransport(path, outer=counter(), mode="all")
    with pytest.raises(KeyError), httpx.Client(transport=transport) as client:
        client.get(URL + "/new")
        raise KeyError("boom")
    assert path.read_bytes() == before


# --- async commits: at once, unless another writer holds the lock -----------------------------


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """(wait, done) for each `CassetteSession.append`."""
    seen: list[tuple[bool, bool]] = []
    real = CassetteSession.append

    def spy(self: CassetteSession, *args: Any, wait: bool = True) -> bool:
        done = real(self, *args, wait=wait)
        seen.append((wait, done))
        return done

    monkeypatch.setattr(CassetteSession, "append", spy)
    return seen


@pytest.mark.anyio
@pytest.mark.parametrize("stream_through", [False, True])
async def test_an_async_commit_appends_at_once_without_a_thread(
    tmp_path: Path, commits: list[tuple[bool, bool]], stream_through: bool
) -> None:
    path = tmp_path / "c.jsonl"
    transport = RecordingTransport(
        path, outer=counter(), mode="new_episodes", stream_through=stream_through
    )
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(URL)).text == "live 1"
    assert commits == [(False, True)]  # not waited for, and done: no worker thread
    assert urls(path) == [URL]


@pytest.mark.anyio
@pytest.mark.parametrize("other", ["process", "thread"])
async def test_an_async_commit_waits_for_another_writer_off_the_event_loop(
    tmp_path: Path, commits: list[tuple[bool, bool]], other: str
) -> None:
    # Another writer holds a lock the commit needs: it is not waited for on the event loop,
    # which runs on (other tasks, and this one) until the lock is free; then it is appended.
    # "process": the file's append lock, held through another open file (as another process
    # would hold it), while appending (mode "new_episodes").  "thread": the session's lock,
    # held by another thread between this request's plan and its commit, while re-recording
    # (mode "all": the fresh file is this process's alone).
    path = tmp_path / "c.jsonl"
    path.write_bytes(HEADER)
    taken, let_go = threading.Event(), threading.Event()
    outer = counter()
    if other == "thread":

        def hold_the_session_lock() -> None:
            with transport._user.session._lock:
                taken.set()
                let_go.wait(60)

        def answer(request: httpx.Request) -> httpx.Response:
            threading.Thread(target=hold_the_session_lock, daemon=True).start()
            taken.wait(60)
            return httpx.Response(200, text="live 1")

        outer = httpx.MockTransport(answer)
    transport = RecordingTransport(
        path, outer=outer, mode="all" if other == "thread" else "new_episodes"
    )
    done: list[str] = []
    async with httpx.AsyncClient(transport=transport) as client:

        async def send() -> None:
            done.append((await client.get(URL)).text)

        with contextlib.ExitStack() as stack:
            if other == "process":
                fd = stack.enter_context(locked(path))
                # A hang guard only: a commit that waited on the event loop would wait for this.
                guard = threading.Timer(60, _cassette._unlock, (fd,))
            else:
                guard = threading.Timer(60, let_go.set)
            guard.start()
            try:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(send)
                    with anyio.fail_after(60):
                        while (False, False) not in commits:  # tried at once: taken
                            await anyio.sleep(0.01)
                    for _ in range(10):
                        await anyio.sleep(0)  # the event loop runs on while it waits
                    assert done == []
                    stack.close()  # the other writer lets go
                    let_go.set()
            finally:
                guard.cancel()
    transport.close()
    assert done == ["live 1"]
    assert commits == [(False, False), (True, True)]
    assert urls(path) == [URL]


# --- secrets: remembered by the session, for its life ------------------------------------------


API = "https://api.example.test"
CALLBACK = "https://cb.example.test"
#: 60 distinct tokens, far more than a few recent requests' worth.
TOKENS = [f"tok-{n:02d}-{n * 7919 % 100003:05d}-session-secret" for n in range(60)]


def _api(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/login":
        # The redirect echoes the FIRST token, sent 60 requests ago, in its location.
        return httpx.Response(302, headers={"location": f"{CALLBACK}/landing?code={TOKENS[0]}"})
    return httpx.Response(200, json={"you_sent": request.headers["authorization"]})


def _callback(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, text=f"landed at {request.url}")


@pytest.mark.parametrize("flavor", ["sync", "asyncio", "trio"])
def test_the_session_remembers_every_secret_for_its_life(tmp_path: Path, flavor: str) -> None:
    # Every token sent through one transport; then a redirect whose location echoes the first
    # of them, followed by the client through a SECOND transport of the same cassette (mounted
    # for the other origin, where httpx drops `authorization`).  No token may reach the file.
    path = tmp_path / "c.jsonl"
    options: dict[str, Any] = {"mode": "new_episodes", "secret_headers": ["authorization"]}
    api = RecordingTransport(path, outer=httpx.MockTransport(_api), **options)
    callback = RecordingTransport(path, outer=httpx.MockTransport(_callback), **options)
    mounts: dict[str, Any] = {API: api, CALLBACK: callback}
    last = {"authorization": f"Bearer {TOKENS[-1]}"}
    if flavor == "sync":
        with httpx.Client(mounts=mounts, follow_redirects=True) as client:
            for n, token in enumerate(TOKENS):
                client.get(f"{API}/items/{n}", headers={"authorization": f"Bearer {token}"})
            landed = client.get(f"{API}/login", headers=last)
    else:

        async def run() -> httpx.Response:
            async with httpx.AsyncClient(mounts=mounts, follow_redirects=True) as client:
                for n, token in enumerate(TOKENS):
                    headers = {"authorization": f"Bearer {token}"}
                    await client.get(f"{API}/items/{n}", headers=headers)
                return await client.get(f"{API}/login", headers=last)

        landed = anyio.run(run, backend=flavor)
    # The caller got the live answers; only the file is redacted.
    assert landed.text == f"landed at {CALLBACK}/landing?code={TOKENS[0]}"
    data = path.read_bytes()
    for token in TOKENS:
        assert token.encode() not in data
    assert urls(path)[-1] == f"{CALLBACK}/landing?code=%3Credacted%3E"
    assert len(urls(path)) == len(TOKENS) + 2


def test_an_exchange_redacted_with_a_secret_learned_while_it_was_recorded_replays(
    tmp_path: Path,
) -> None:
    # `plain` (no secret headers) plans a request whose URL holds a token nobody has sent yet;
    # while it is out, `api` sends that token, so the session learns it and `plain`'s exchange
    # is written redacted.  It must be indexed as written, so the same request replays.
    path = tmp_path / "c.jsonl"
    token = "tok-learned-while-recording-5e2"
    api = RecordingTransport(
        path, outer=httpx.MockTransport(_api), mode="new_episodes", secret_headers=["authorization"]
    )

    def meanwhile(request: httpx.Request) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"}
        httpx.Client(transport=api).get(f"{API}/items/1", headers=headers)
        return httpx.Response(200, text="seen")

    plain = RecordingTransport(path, outer=httpx.MockTransport(meanwhile), mode="new_episodes")
    replay = RecordingTransport(path, mode="none", allow_repeats=True)
    url = f"{CALLBACK}/landing?code={token}"
    assert httpx.Client(transport=plain).get(url).text == "seen"
    assert httpx.Client(transport=replay).get(url).text == "seen"
    for transport in (api, plain, replay):
        transport.close()
    assert token.encode() not in path.read_bytes()


def test_an_append_that_fails_keeps_the_old_cassette_in_a_rerecording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk is full while the second exchange is written: the code under test catches the
    error and closes cleanly, but the re-recording lacks that exchange, so replacing the old
    cassette with it would lose one; the old cassette stays, byte for byte."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(HEADER + exchange("one", URL + "/a") + exchange("two", URL + "/b"))
    before = path.read_bytes()
    real = _cassette._write_at  # (how a re-recording appends its lines)

    def full(fd: int, offset: int, data: bytes) -> None:
        if (URL + "/b").encode() in data:
            raise OSError(28, "No space left on device")
        real(fd, offset, data)

    monkeypatch.setattr(_cassette, "_write_at", full)
    with RecordingTransport(path, outer=counter(), mode="all") as transport:
        client = httpx.Client(transport=transport)
        client.get(URL + "/a")
        with pytest.raises(OSError, match="No space left"):
            client.get(URL + "/b")
    assert path.read_bytes() == before
    assert not (tmp_path / "c.jsonl.recording").exists()
