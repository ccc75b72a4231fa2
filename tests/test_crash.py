"""Crashes and concurrency: no acknowledged exchange is ever lost, duplicated or torn.

A recorder runs in a child process and prints ``ack <n>`` after each request returns (by then
its exchange has been appended).  The parent kills it with SIGKILL at random moments, repairs a
torn last line if the kill left one (exactly what `sakura-http repair` does), restarts it, and
finally checks the cassette: it loads, every acknowledged exchange is in it exactly once, and
nothing else is (an exchange appended just before the kill, never acknowledged, may be there).

A re-recording (mode "all") owns the cassette from open to close: the tests at the end run one
among appenders in other processes, kill either side at random, and check that no append was
acknowledged and then lost, and that the next open leaves no stray `<name>.recording`.

The default run is bounded (a few kills, a few seconds); ``SAKURA_HTTP_LONG_TESTS=1`` runs
`LONG_KILLS` kills.  Timeouts are hang guards only.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sakura_http import CassetteFormatError, RecordingTransport, _cassette
from sakura_http._cassette import append_lines, load_cassette, locked
from sakura_http._format import Exchange, encode_exchange, encode_header, torn_tail
from sakura_http.cli._repair import repair_cassette

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and flock are POSIX")

LONG = os.environ.get("SAKURA_HTTP_LONG_TESTS") == "1"
KILLS = 3
LONG_KILLS = 100
HANG_GUARD = 120  # seconds; a guard against a hung child, never a performance bound

RECORDER = r"""
import sys
import httpx
from sakura_http import CassetteFormatError, RecordingTransport

path, worker, start, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
body = b"x" * int(sys.argv[5])
outer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
n = start
try:
    # Loading, too, refuses a cassette that another recorder's kill left torn.
    transport = RecordingTransport(path, outer=outer, mode=mode)
    client = httpx.Client(transport=transport)
    while True:
        client.get(f"https://api.example.test/{worker}/{n}")
        print(f"ack {n}", flush=True)
        n += 1
        if mode == "all" and n - start == int(sys.argv[6]):
            transport.close()
            print("closed", flush=True)
            break
except CassetteFormatError:
    sys.exit(3)  # another recorder was killed mid-write: the parent repairs the file
"""


class Recorder:
    """One recording child process and what it acknowledged."""

    def __init__(self, path: Path, worker: str, start: int, body: int, mode: str = "new_episodes",
                 stop_after: int = 0) -> None:  # fmt: skip
        self.acked: list[int] = []
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-c", RECORDER, str(path), worker, str(start), mode, str(body),
             str(stop_after)],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._ready = threading.Condition()
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._ready:
                self.lines.append(line.strip())
                if line.startswith("ack "):
                    self.acked.append(int(line.split()[1]))
                self._ready.notify_all()
        with self._ready:
            self._ready.notify_all()

    def wait_for_acks(self, count: int) -> None:
        with self._ready:
            self._ready.wait_for(
                lambda: len(self.acked) >= count or not self._reader.is_alive(), HANG_GUARD
            )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.finish()

    def finish(self) -> int:
        code = self.process.wait(HANG_GUARD)
        self._reader.join(HANG_GUARD)  # every ack printed before the end has been read
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


def repair_if_torn(path: Path) -> None:
    if path.exists() and torn_tail(path.read_bytes()):
        assert repair_cassette(path).action in ("removed", "completed")


def check(path: Path, acked: dict[str, set[int]]) -> int:
    """The cassette loads; every acknowledged exchange is in it exactly once."""
    urls = Counter(e.url for e in load_cassette(path).exchanges)
    assert all(count == 1 for count in urls.values()), "duplicated exchange"
    for worker, numbers in acked.items():
        for n in numbers:
            assert urls[f"https://api.example.test/{worker}/{n}"] == 1, f"lost {worker}/{n}"
    return sum(urls.values())


def test_a_recorder_killed_repeatedly_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    rng = random.Random(1234)
    acked: set[int] = set()
    start = 0
    for _ in range(LONG_KILLS if LONG else KILLS):
        recorder = Recorder(path, "w", start, body=rng.choice([100, 20_000, 300_000]))
        recorder.wait_for_acks(rng.randint(1, 15))
        recorder.kill()
        acked.update(recorder.acked)
        # Never reuse a number: the one after the last acknowledged may have been appended.
        start = max([start, *recorder.acked]) + 2
        repair_if_torn(path)
    assert len(acked) >= KILLS
    total = check(path, {"w": acked})
    assert total >= len(acked)
    kills = LONG_KILLS if LONG else KILLS
    print(f"\n{kills} kills of one recorder: {len(acked)} acknowledged, {total} in the cassette")


def test_concurrent_recorders_killed_at_random_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    rng = random.Random(99)
    acked: dict[str, set[int]] = {f"w{i}": set() for i in range(3)}
    next_start = dict.fromkeys(acked, 0)
    rounds = (LONG_KILLS // 4) if LONG else 2
    for _ in range(rounds):
        recorders = {
            w: Recorder(path, w, next_start[w], body=rng.choice([100, 50_000])) for w in acked
        }
        victim = rng.choice(list(recorders))
        recorders[victim].wait_for_acks(rng.randint(1, 10))
        recorders[victim].kill()
        for w, recorder in recorders.items():
            if w != victim:
                recorder.wait_for_acks(1)
                recorder.kill()
        for w, recorder in recorders.items():
            acked[w].update(recorder.acked)
            next_start[w] = max([next_start[w], *recorder.acked]) + 2
        repair_if_torn(path)
    assert sum(map(len, acked.values())) >= rounds  # each victim acknowledged one at least
    total = check(path, acked)
    print(f"\n{rounds} rounds of 3 concurrent recorders, all killed: "
          f"{sum(map(len, acked.values()))} acknowledged, {total} in the cassette")  # fmt: skip


def test_a_killed_re_recording_leaves_the_old_cassette_untouched(tmp_path: Path) -> None:
    path = tmp_path / "all.jsonl"
    old = encode_header() + b"".join(
        encode_exchange(Exchange("GET", f"https://api.example.test/old/{n}")) for n in range(3)
    )
    path.write_bytes(old)
    rng = random.Random(7)
    kills = LONG_KILLS // 4 if LONG else 2
    for _ in range(kills):
        recorder = Recorder(path, "new", 0, body=20_000, mode="all", stop_after=10_000)
        recorder.wait_for_acks(rng.randint(1, 20))
        recorder.kill()
        assert path.read_bytes() == old
    print(f"\n{kills} kills of a re-recording (mode all): the old cassette intact each time")
    recorder = Recorder(path, "new", 0, body=100, mode="all", stop_after=5)
    assert recorder.finish() == 0
    assert "closed" in recorder.lines
    assert check(path, {"new": set(range(5))}) == 5


def test_appends_hold_the_lock_while_they_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deterministic: at every write, a second open file description of the cassette tries the
    # lock without blocking; it must fail, because the appender holds it.  Without the lock
    # (or with it released too early) the probe succeeds and this test fails every time.
    path = tmp_path / "c.jsonl"
    real_write_all = _cassette._write_all
    probes: list[bool] = []

    def probing_write_all(fd: int, data: bytes) -> None:
        with open(path, "rb") as other:
            got = _cassette._lock(other.fileno(), blocking=False)
            if got:
                _cassette._unlock(other.fileno())
            probes.append(got)
        real_write_all(fd, data)

    monkeypatch.setattr(_cassette, "_write_all", probing_write_all)
    for n in range(3):
        append_lines(path, encode_exchange(Exchange("GET", f"https://api.example.test/{n}")), {})
    assert probes == [False, False, False]
    assert len(load_cassette(path).exchanges) == 3


def test_an_append_that_may_not_wait_leaves_a_locked_cassette_alone(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    line = encode_exchange(Exchange("GET", "https://api.example.test/a"))
    append_lines(path, line, {})
    before = path.read_bytes()
    with locked(path):  # another writer (an open file of its own, as another process has)
        assert append_lines(path, line, {}, wait=False) is False
        assert path.read_bytes() == before
    assert append_lines(path, line, {}, wait=False) is True
    assert len(load_cassette(path).exchanges) == 2


def test_a_torn_tail_refuses_appends_until_repaired(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    line = encode_exchange(Exchange("GET", "https://api.example.test/a"))
    path.write_bytes(encode_header() + line + line[: len(line) // 2])
    with pytest.raises(CassetteFormatError):
        append_lines(path, line, {})
    repair_if_torn(path)
    append_lines(path, line, {})
    assert len(load_cassette(path).exchanges) == 2


# --- a re-recording (mode "all") and appends from other processes ------------------------------

DRIVEN = r"""
import sys, time
import httpx
from sakura_http import CassetteError, RecordingTransport

path, mode, body = sys.argv[1], sys.argv[2], b"x" * int(sys.argv[3])
outer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))

def refused(exc):
    text = str(exc).replace("\n", " ")
    print(f"refused {type(exc).__name__} {text}", flush=True)

try:
    transport = RecordingTransport(path, outer=outer, mode=mode)
except CassetteError as exc:
    refused(exc)
    sys.exit(0)
print(f"open {time.monotonic_ns()}", flush=True)  # the cassette is open (re-recording: claimed)
client = httpx.Client(transport=transport)
for command in sys.stdin:
    word, _, url = command.strip().partition(" ")
    if word == "get":
        try:
            client.get(url)
        except CassetteError as exc:
            refused(exc)
        else:
            print(f"ack {url}", flush=True)
    elif word == "close":
        transport.close()
        print("closed", flush=True)
        break
"""


class Driven:
    """A child process with one transport on a cassette, driven line by line from here:
    ``get URL`` answers ``ack URL`` once the exchange is recorded (or ``refused <error> ...``),
    ``close`` answers ``closed`` once the transport is closed (a re-recording committed)."""

    def __init__(self, path: Path, mode: str, body: int = 100, *, wait: bool = True) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", DRIVEN, str(path), mode, str(body)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.replies: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.first = ""
        #: When the cassette was open (re-recording: claimed), on the system's monotonic clock.
        self.opened_at: int | None = None
        if wait:
            self.wait_open()

    def wait_open(self) -> None:
        self.first = self.reply()  # "open <monotonic ns>" or "refused ..."
        self.opened_at = int(self.first.split()[1]) if self.first.startswith("open ") else None

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.replies.put(line.strip())
        self.replies.put("<exit>")

    def reply(self) -> str:
        return self.replies.get(timeout=HANG_GUARD)

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def ask(self, command: str) -> str:
        self.send(command)
        return self.reply()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.end()

    def end(self) -> int:
        code = self.process.wait(HANG_GUARD)
        self._reader.join(HANG_GUARD)
        for stream in (self.process.stdin, self.process.stdout):
            assert stream is not None
            with contextlib.suppress(BrokenPipeError):
                stream.close()
        return code


def _old_cassette(path: Path) -> None:
    path.write_bytes(
        encode_header()
        + b"".join(
            encode_exchange(Exchange("GET", f"https://api.example.test/old/{n}")) for n in range(3)
        )
    )


def _urls(path: Path) -> list[str]:
    return [exchange.url for exchange in load_cassette(path).exchanges]


@pytest.mark.parametrize("recorded_first", [0, 2], ids=["claimed-on-open", "mid-recording"])
def test_an_append_during_a_re_recording_elsewhere_is_refused_never_lost(
    tmp_path: Path, recorded_first: int
) -> None:
    # Process R re-records the cassette (mode "all"); process B appends to it (new_episodes)
    # meanwhile, then R commits.  Every append B saw acknowledged must be in the cassette R
    # leaves; an append that cannot be kept must fail, naming R.  (It used to be acknowledged
    # and then deleted by R's commit: 5 of 5 lost.)
    path = tmp_path / "c.jsonl"
    _old_cassette(path)
    rerecorder = Driven(path, "all")
    assert rerecorder.opened_at is not None, rerecorder.first
    for n in range(recorded_first):
        assert rerecorder.ask(f"get https://api.example.test/r/{n}").startswith("ack ")
    appender = Driven(path, "new_episodes")
    replies = [appender.ask(f"get https://api.example.test/b/{n}") for n in range(5)]
    assert rerecorder.ask("get https://api.example.test/r/last") == (
        "ack https://api.example.test/r/last"
    )
    assert rerecorder.ask("close") == "closed"
    assert rerecorder.end() == 0
    acked = [reply.split()[1] for reply in replies if reply.startswith("ack ")]
    urls = _urls(path)
    assert [url for url in acked if url not in urls] == [], "acknowledged, then lost"
    for reply in replies:
        assert reply.startswith("refused RerecordingInProgress "), reply
        assert f"process {rerecorder.process.pid}" in reply
        assert "another process is re-recording" in reply
    # Once the re-recording is over, the same appender records into the new cassette.
    assert appender.ask("get https://api.example.test/b/after") == (
        "ack https://api.example.test/b/after"
    )
    assert appender.ask("close") == "closed"
    appender.end()
    assert _urls(path) == [
        *(f"https://api.example.test/r/{n}" for n in range(recorded_first)),
        "https://api.example.test/r/last",
        "https://api.example.test/b/after",
    ]


def test_a_second_re_recording_is_refused_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    _old_cassette(path)
    first = Driven(path, "all")
    assert first.opened_at is not None, first.first
    second = Driven(path, "all")
    assert second.first.startswith("refused RerecordingInProgress "), second.first
    assert f"process {first.process.pid}" in second.first
    assert second.end() == 0
    assert first.ask("get https://api.example.test/r/0") == "ack https://api.example.test/r/0"
    assert first.ask("close") == "closed"
    first.end()
    assert _urls(path) == ["https://api.example.test/r/0"]


def test_a_killed_re_recording_frees_the_cassette_and_its_stray_file_goes(
    tmp_path: Path,
) -> None:
    # SIGKILL leaves `<name>.recording` behind (redacted data, nothing keeping it out of git).
    # The lock its writer held dies with it: the next open of the cassette removes the file,
    # and appends are no longer refused.
    path = tmp_path / "c.jsonl"
    _old_cassette(path)
    old = path.read_bytes()
    stray = path.with_name(path.name + ".recording")
    rerecorder = Driven(path, "all", body=20_000)
    for n in range(3):
        assert rerecorder.ask(f"get https://api.example.test/r/{n}").startswith("ack ")
    assert stray.exists()
    rerecorder.kill()
    assert stray.exists()
    assert path.read_bytes() == old
    appender = Driven(path, "new_episodes")
    assert appender.opened_at is not None, appender.first
    assert not stray.exists()
    assert appender.ask("get https://api.example.test/b/0") == "ack https://api.example.test/b/0"
    assert appender.ask("close") == "closed"
    appender.end()
    assert _urls(path)[-1] == "https://api.example.test/b/0"
    assert len(_urls(path)) == 4


APPENDER = r"""
import sys, time
import httpx
from sakura_http import CassetteFormatError, RecordingTransport, RerecordingInProgress

path, worker, start, body = sys.argv[1], sys.argv[2], int(sys.argv[3]), b"x" * int(sys.argv[4])
outer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
try:
    client = httpx.Client(transport=RecordingTransport(path, outer=outer, mode="new_episodes"))
    n = start
    while True:
        began = time.monotonic_ns()
        try:
            client.get(f"https://api.example.test/{worker}/{n}")
        except RerecordingInProgress:
            print(f"refused {n}", flush=True)
            time.sleep(0.002)  # (another process is re-recording: try again shortly)
        else:
            print(f"ack {n} {began}", flush=True)
            time.sleep(0.001)  # (room for the other processes on a loaded machine)
        n += 1
except CassetteFormatError:
    sys.exit(3)  # another appender was killed mid-write: the parent repairs the file
"""


class Appender:
    """A child appending (mode new_episodes) in a loop: ``ack <n> <began>`` once exchange n is
    appended (`began`: the monotonic clock before its request started), ``refused <n>`` when a
    re-recording elsewhere refused it."""

    def __init__(self, path: Path, worker: str, start: int, body: int) -> None:
        self.worker = worker
        self.acked: list[tuple[int, int]] = []
        self.refused: list[int] = []
        self.process = subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(path), worker, str(start), str(body)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._ready = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            word, n, *rest = line.split()
            with self._ready:
                if word == "ack":
                    self.acked.append((int(n), int(rest[0])))
                else:
                    self.refused.append(int(n))
                self._ready.notify_all()
        with self._ready:
            self._ready.notify_all()

    def wait_for_acks(self, count: int) -> None:
        with self._ready:
            self._ready.wait_for(
                lambda: len(self.acked) >= count or not self._reader.is_alive(), HANG_GUARD
            )

    def wait_for_refusal(self, since: int) -> None:
        """Until a refusal, or an append acknowledged that began after `since` (which a live
        re-recording since then should have refused: the caller's checks find it)."""
        with self._ready:
            self._ready.wait_for(
                lambda: (
                    self.refused
                    or any(began > since for _, began in self.acked)
                    or not self._reader.is_alive()
                ),
                HANG_GUARD,
            )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(HANG_GUARD)
        self._reader.join(HANG_GUARD)
        assert self.process.stdout is not None
        self.process.stdout.close()

    @property
    def next_start(self) -> int:
        # Never reuse a number: the one after the last reported may have been appended.
        return max([n for n, _ in self.acked] + self.refused, default=0) + 2


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test started; those still running when it ends (it failed) are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(HANG_GUARD)


def test_re_recordings_and_appenders_killed_at_random_lose_no_acknowledged_append(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """Each round: appenders run in their own processes; two processes try to re-record the
    cassette at once (one must be refused, naming the other); the one that owns it records,
    then closes or is killed (mid-write, at times); appenders are killed at random.  After
    each round, the next open leaves no stray `.recording`, and every acknowledged append is
    in the cassette unless a re-recording that *began after its request started* replaced it
    (an append that began earlier may have finished before the re-recording and been part of
    what it replaced).  A refused append is never in the cassette."""
    path = tmp_path / "shared.jsonl"
    _old_cassette(path)
    stray = path.with_name(path.name + ".recording")
    rng = random.Random(2023)
    rounds = LONG_KILLS // 3 if LONG else 2
    acks: list[tuple[str, int, int]] = []  # (worker, n, began)
    refused: set[str] = set()
    next_start = {"a0": 0, "a1": 0}
    replaced_before: int | None = None  # when the last committed re-recording began
    kills = owner_kills = commits = rerecorded = strays = 0
    for round_ in range(rounds):
        appenders = [
            Appender(path, w, next_start[w], rng.choice([100, 50_000])) for w in next_start
        ]
        children.extend(appender.process for appender in appenders)
        for appender in appenders:
            appender.wait_for_acks(rng.randint(1, 5))
        owner, other = (Driven(path, "all", rng.choice([100, 300_000]), wait=False) for _ in "12")
        children.extend((owner.process, other.process))
        owner.wait_open()
        other.wait_open()
        if owner.opened_at is None:
            owner, other = other, owner
        assert owner.opened_at is not None, owner.first
        assert other.first.startswith("refused RerecordingInProgress "), other.first
        assert f"process {owner.process.pid}" in other.first
        assert other.end() == 0
        for appender in appenders:
            appender.wait_for_refusal(owner.opened_at)  # (or it exited: torn by another's kill)
        if rng.random() < 0.5 if LONG else round_ == 1:  # an appender dies while the cassette
            # is being re-recorded; the one replacing it opens the cassette meanwhile
            victim = rng.randrange(len(appenders))
            appenders[victim].kill()
            kills += 1
            replacement = Appender(
                path, appenders[victim].worker, appenders[victim].next_start, 100
            )
            appenders.append(replacement)
            children.append(replacement.process)
            replacement.wait_for_refusal(owner.opened_at)
        owned: list[str] = []
        for n in range(rng.randint(1, 6)):
            url = f"https://api.example.test/r{round_}/{n}"
            assert owner.ask(f"get {url}") == f"ack {url}"
            owned.append(url)
        kill_owner = round_ % 2 == 0 if not LONG else rng.random() < 0.5
        if kill_owner:
            late = rng.randint(0, 3)
            for n in range(late):  # killed mid-write, at times
                owner.send(f"get https://api.example.test/r{round_}/late{n}")
            if late and rng.random() < 0.5:
                owner.reply()
            owner.kill()
            kills += 1
            owner_kills += 1
        else:
            assert owner.ask("close") == "closed"
            assert owner.end() == 0
            commits += 1
            rerecorded += len(owned)
            replaced_before = owner.opened_at
        for appender in appenders:  # appends work again, into the cassette now in place
            appender.wait_for_acks(len(appender.acked) + rng.randint(1, 5))
        for appender in appenders:
            if appender.process.poll() is None:
                appender.kill()
                kills += 1
            acks.extend((appender.worker, n, began) for n, began in appender.acked)
            refused.update(f"{appender.worker}/{n}" for n in appender.refused)
            next_start[appender.worker] = max(next_start[appender.worker], appender.next_start)
        repair_if_torn(path)
        strays += stray.exists()
        RecordingTransport(path).close()  # the next open: a stray's writer is gone
        assert not stray.exists()
        urls = Counter(e.url for e in load_cassette(path).exchanges)
        assert all(count == 1 for count in urls.values()), "duplicated exchange"
        if not kill_owner:
            assert all(urls[url] == 1 for url in owned), "the re-recording lost an exchange"
        lost = [
            f"{worker}/{n}"
            for worker, n, began in acks
            if (replaced_before is None or began > replaced_before)
            and urls[f"https://api.example.test/{worker}/{n}"] != 1
        ]
        assert lost == [], "acknowledged, then lost"
        written = {url.removeprefix("https://api.example.test/") for url in urls}
        assert not refused & written, "a refused append was written"
    assert commits >= 1 and kills >= rounds
    print(
        f"\n{rounds} rounds of a re-recording among appenders, {kills} kills ({owner_kills} of "
        f"the re-recording), {commits} re-recordings committed ({rerecorded} exchanges): "
        f"{len(acks)} appends acknowledged, {len(refused)} refused, 0 lost; {strays} strays, "
        "each removed by the next open"
    )
