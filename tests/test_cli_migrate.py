"""`sakura-http migrate`: a vcrpy / pytest-recording suite moved over in one command.

Each test builds a small suite in a temporary folder (vcrpy YAML cassettes written by hand, for
hosts under .example.test that nothing ever reaches) and runs the command on it in-process;
the suite itself runs in a pytest subprocess, offline.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sakura_http._cassette import load_cassette
from sakura_http.cli import _migrate
from tests.cli_support import assert_one_line_error, run

pytest.importorskip("libcst")  # the dev group installs it; the no-libcst message is tested below


def interaction(
    method: str,
    uri: str,
    status: int,
    body: str,
    request_body: str | None = None,
    content_type: str = "application/json",
) -> str:
    """One vcrpy interaction, as vcrpy writes it (YAML)."""
    sent = "null" if request_body is None else repr(request_body)
    request_type = "\n      content-type: [application/json]" if request_body is not None else ""
    return f"""\
- request:
    body: {sent}
    headers:
      accept: ['*/*']{request_type}
    method: {method}
    uri: {uri}
  response:
    body:
      string: {body!r}
    headers:
      content-type: [{content_type}]
    status:
      code: {status}
      message: OK
"""


def vcr_yaml(*interactions: str) -> str:
    return "interactions:\n" + "".join(interactions) + "version: 1\n"


USERS = interaction("GET", "https://api.example.test/users", 200, '[{"id": 1}]')
HEALTH = interaction("GET", "https://api.example.test/health", 200, "ok", content_type="text/plain")
CREATE = interaction(
    "POST", "https://api.example.test/users", 201, '{"id": 2}', request_body='{"name": "Ben"}'
)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


SUITE = {
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
    "tests/conftest.py": """\
        import pytest


        @pytest.fixture(scope="module")
        def vcr_config():
            return {
                "filter_headers": ["authorization"],
                "record_mode": "none",
            }
        """,
    "tests/test_api.py": """\
        import httpx
        import pytest

        pytestmark = [pytest.mark.vcr]


        def test_list_users():
            # The token is filtered out of the cassette by vcr_config.
            response = httpx.get(
                "https://api.example.test/users", headers={"authorization": "Bearer sk-test"}
            )
            assert response.json() == [{"id": 1}]


        @pytest.mark.vcr("shared.yaml")
        def test_health():
            assert httpx.get("https://api.example.test/health").text == "ok"


        def test_create_user(vcr):
            response = httpx.post("https://api.example.test/users", json={"name": "Ben"})
            assert response.status_code == 201
            assert vcr.requests[0].uri == "https://api.example.test/users"
            assert vcr.play_count == 1
            assert vcr.all_played
        """,
    "tests/cassettes/test_api/test_list_users.yaml": vcr_yaml(USERS),
    "tests/cassettes/test_api/shared.yaml": vcr_yaml(HEALTH),
    "tests/cassettes/test_api/test_create_user.yaml": vcr_yaml(CREATE),
}


def pytest_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        check=False,
    )


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    write(tmp_path, SUITE)
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


# --- planning ---------------------------------------------------------------------------------


def test_the_suite_passes_on_vcrpy_first(suite: Path) -> None:
    """The sample is a real pytest-recording suite: it passes as it is, offline."""
    result = pytest_in(suite, "--record-mode=none", "-p", "no:sakura_http")
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_write_it_prints_the_plan_and_diffs_and_writes_nothing(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(suite)
    result = run(capsys, "migrate", suite)
    assert result.code == 0, result.err
    assert snapshot(suite) == before
    out = result.out
    assert (
        "cassette to convert: tests/cassettes/test_api/test_list_users.yaml -> "
        "tests/fixtures/test_api/test_list_users.jsonl (1 exchange, verified by replay; "
        "tests/test_api.py::test_list_users)"
    ) in out
    assert "tests/cassettes/test_api/shared.yaml -> tests/fixtures/shared.jsonl" in out
    assert (
        "-pytestmark = [pytest.mark.vcr]\n+pytestmark = [pytest.mark.cassette(patch_clients=True)]"
        in out
    )
    assert '+@pytest.mark.cassette("shared.jsonl", patch_clients=True)' in out
    assert "+def test_create_user(sakura_cassette):" in out
    assert '+    assert sakura_cassette.exchanges[0].url == "https://api.example.test/users"' in out
    assert "+    assert (not sakura_cassette.unplayed())" in out
    assert "+sakura_secret_headers =\n+    authorization\n" in out
    assert "+sakura_record_hosts =\n+    api.example.test\n" in out
    assert "-def vcr_config():" in out
    assert "record_mode='none' dropped" in out
    assert out.rstrip().endswith("nothing was written; run again with --write to apply this plan")


def test_write_converts_rewrites_and_the_suite_passes_offline(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "migrate", "--write", suite)
    assert result.code == 0, result.out + result.err
    assert "passed  tests/test_api.py::test_create_user" in result.out
    assert "summary: 3 passed" in result.out
    converted = load_cassette(suite / "tests/fixtures/test_api/test_list_users.jsonl")
    assert [e.url for e in converted.exchanges] == ["https://api.example.test/users"]
    assert (suite / "tests/cassettes/test_api/shared.yaml").exists()  # kept without --remove-old
    tests = (suite / "tests/test_api.py").read_text()
    assert "# The token is filtered out of the cassette by vcr_config." in tests  # formatting kept
    assert "mark.vcr" not in tests and "vcr." not in tests and "(vcr)" not in tests
    again = pytest_in(suite, "-p", "no:recording")  # no pytest-recording needed any more
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 passed" in again.stdout


def test_remove_old_deletes_the_converted_sources(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "migrate", "--write", "--remove-old", "--no-run", suite)
    assert result.code == 0, result.err
    assert not list((suite / "tests/cassettes").rglob("*.yaml"))
    assert "the suite was not run (--no-run)" in result.out
    assert "offline run" not in result.out


def test_remove_old_needs_write(suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_error(run(capsys, "migrate", "--remove-old", suite))


def test_two_sources_for_one_cassette_stop_the_run_naming_both(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        suite,
        {
            "tests/test_other.py": """\
                import httpx
                import pytest


                @pytest.mark.vcr("shared.yaml")
                def test_health_again():
                    assert httpx.get("https://api.example.test/health").text == "ok"
                """,
            "tests/cassettes/test_other/shared.yaml": vcr_yaml(HEALTH),
        },
    )
    before = snapshot(suite)
    result = run(capsys, "migrate", "--write", suite)
    assert_one_line_error(result)
    assert "tests/cassettes/test_api/shared.yaml (tests/test_api.py::test_health)" in result.err
    assert (
        "tests/cassettes/test_other/shared.yaml (tests/test_other.py::test_health_again)"
    ) in result.err
    assert "would both be written to tests/fixtures/shared.jsonl" in result.err
    assert snapshot(suite) == before


def test_a_vcr_marker_names_extra_cassettes_beside_the_tests_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest-recording reads the names a `vcr` marker gives beside the test's own cassette and
    records into its own one: a name it never wrote keeps the test on its own cassette, and a
    test playing two cassettes is left on vcr and listed (the plugin reads one per marker)."""
    write(
        tmp_path,
        {
            "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
            "tests/test_api.py": """\
                import httpx
                import pytest


                @pytest.mark.vcr("shared.yaml")
                def test_users():
                    assert httpx.get("https://api.example.test/users").json() == [{"id": 1}]


                @pytest.mark.vcr("common.yaml")
                def test_both():
                    assert httpx.get("https://api.example.test/users").json() == [{"id": 1}]
                    assert httpx.get("https://api.example.test/health").text == "ok"
                """,
            "tests/cassettes/test_api/test_users.yaml": vcr_yaml(USERS),  # recorded there
            "tests/cassettes/test_api/test_both.yaml": vcr_yaml(USERS),
            "tests/cassettes/test_api/common.yaml": vcr_yaml(HEALTH),
        },
    )
    on_vcrpy = pytest_in(tmp_path, "--record-mode=none", "-p", "no:sakura_http")
    assert on_vcrpy.returncode == 0, on_vcrpy.stdout + on_vcrpy.stderr
    result = run(capsys, "migrate", "--write", "--no-run", tmp_path)
    assert result.code == 0, result.out + result.err
    tests = (tmp_path / "tests/test_api.py").read_text()
    # Not cassette("shared.jsonl"), which does not exist.
    assert "@pytest.mark.cassette(patch_clients=True)\ndef test_users():" in tests, tests
    assert '@pytest.mark.vcr("common.yaml")\ndef test_both():' in tests
    assert "tests/test_api.py::test_both: left on vcr" in result.out
    assert (tmp_path / "tests/fixtures/test_api/test_users.jsonl").is_file()
    again = pytest_in(tmp_path, "-p", "no:recording", "tests/test_api.py::test_users")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_plain_vcrpy_module_gets_the_pytest_import_its_markers_need(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vcrpy suite need not import pytest (`@my_vcr.use_cassette(...)`); the markers the
    rewrite puts in its place do, so the import is added (it was a NameError at collection)."""
    write(
        tmp_path,
        {
            "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
            "tests/test_plain.py": """\
                import httpx
                import vcr

                my_vcr = vcr.VCR(cassette_library_dir="tests/vcr_cassettes")


                @my_vcr.use_cassette("users.yaml")
                def test_users():
                    assert httpx.get("https://api.example.test/users").json() == [{"id": 1}]


                def test_health():
                    url = "https://api.example.test/health"
                    with my_vcr.use_cassette("health.yaml"):
                        assert httpx.get(url).text == "ok"
                """,
            "tests/vcr_cassettes/users.yaml": vcr_yaml(USERS),
            "tests/vcr_cassettes/health.yaml": vcr_yaml(HEALTH),
        },
    )
    result = run(capsys, "migrate", "--write", tmp_path)
    assert result.code == 0, result.out + result.err
    assert "summary: 2 passed" in result.out
    # A use_cassette block that is not the test's whole body stays, and is listed as such.
    assert "tests/test_plain.py::test_health: with my_vcr.use_cassette(...) left in place" in (
        result.out
    )
    tests = (tmp_path / "tests/test_plain.py").read_text()
    assert tests.startswith("import httpx\nimport vcr\nimport pytest\n"), tests


def test_a_cassette_convert_refuses_stops_the_run_before_anything_is_written(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (suite / "tests/cassettes/test_api/test_list_users.yaml").write_text("[]\n")
    before = snapshot(suite)
    result = run(capsys, "migrate", "--write", suite)
    assert_one_line_error(result)
    assert "test_list_users.yaml: this is a pre-1.0 vcrpy cassette" in result.err
    assert "nothing was written" in result.err
    assert snapshot(suite) == before


def test_an_existing_target_is_never_replaced(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = suite / "tests/fixtures/shared.jsonl"
    target.parent.mkdir(parents=True)
    target.write_text("mine\n")
    result = run(capsys, "migrate", "--write", suite)
    assert_one_line_error(result)
    assert "tests/fixtures/shared.jsonl exists already" in result.err
    assert target.read_text() == "mine\n"


def test_without_libcst_it_names_the_extra(
    suite: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "libcst", None)  # import libcst raises ImportError
    result = run(capsys, "migrate", suite)
    assert_one_line_error(result)
    assert "pip install 'sakura-http[migrate]'" in result.err


# --- rewriting ---------------------------------------------------------------------------------


def test_classes_default_cassette_and_use_cassette_are_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        tmp_path,
        {
            "tests/test_more.py": """\
                import httpx
                import pytest
                import vcr


                @pytest.mark.vcr
                class TestUsers:
                    def test_list(self):  # a comment kept
                        assert httpx.get("https://api.example.test/users").json() == [{"id": 1}]


                @pytest.mark.vcr
                @pytest.mark.default_cassette("users.yaml")
                def test_named():
                    assert httpx.get("https://api.example.test/users").status_code == 200


                @vcr.use_cassette("tests/cassettes/health.yaml")
                def test_decorated():
                    assert httpx.get("https://api.example.test/health").text == "ok"


                def test_wrapped():
                    with vcr.use_cassette("tests/cassettes/health2.yaml"):
                        response = httpx.get("https://api.example.test/health")
                        assert response.text == "ok"
                """,
            "tests/cassettes/test_more/TestUsers.test_list.yaml": vcr_yaml(USERS),
            "tests/cassettes/test_more/users.yaml": vcr_yaml(USERS),
            "tests/cassettes/health.yaml": vcr_yaml(HEALTH),
            "tests/cassettes/health2.yaml": vcr_yaml(HEALTH),
        },
    )
    result = run(capsys, "migrate", "--write", tmp_path)
    assert result.code == 0, result.out + result.err
    assert "summary: 4 passed" in result.out
    code = (tmp_path / "tests/test_more.py").read_text()
    assert "@pytest.mark.cassette(patch_clients=True)\nclass TestUsers:" in code
    assert "def test_list(self):  # a comment kept" in code
    assert '@pytest.mark.cassette("users.jsonl", patch_clients=True)\ndef test_named' in code
    assert "default_cassette" not in code
    assert '@pytest.mark.cassette("health.jsonl", patch_clients=True)\ndef test_decorated' in code
    assert (
        '@pytest.mark.cassette("health2.jsonl", patch_clients=True)\ndef test_wrapped():\n'
        '    response = httpx.get("https://api.example.test/health")\n'
    ) in code
    for name in ("test_more/TestUsers.test_list", "users", "health", "health2"):
        assert (tmp_path / f"tests/fixtures/{name}.jsonl").is_file(), name


def test_vcr_config_becomes_ini_options_and_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": (
                '[project]\nname = "app"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
            ),
            "tests/conftest.py": """\
                import pytest


                @pytest.fixture
                def vcr_config():
                    return {
                        "filter_headers": [("x-api-key", "DUMMY")],
                        "filter_query_parameters": ["key"],
                        "match_on": ["method", "scheme", "host", "port", "path", "query"],
                    }
                """,
            "tests/test_q.py": """\
                import httpx
                import pytest


                @pytest.mark.vcr
                def test_search():
                    response = httpx.get(
                        "https://search.example.test:8443/q?term=tea&key=live-secret",
                        headers={"x-api-key": "live-key", "x-trace": "run-2"},
                    )
                    assert response.json() == {"hits": 1}
                """,
            "tests/cassettes/test_q/test_search.yaml": vcr_yaml(
                interaction(
                    "GET", "https://search.example.test:8443/q?term=tea", 200, '{"hits": 1}'
                )
            ),
        },
    )
    result = run(capsys, "migrate", "--write", tmp_path)
    assert result.code == 0, result.out + result.err
    assert "summary: 1 passed" in result.out
    pyproject = (tmp_path / "pyproject.toml").read_text()
    assert 'sakura_secret_headers = ["x-api-key"]\n' in pyproject
    assert 'sakura_record_hosts = ["search.example.test:8443"]\n' in pyproject
    conftest = (tmp_path / "tests/conftest.py").read_text()
    assert "def vcr_config" not in conftest
    assert "def sakura_rules() -> sakura_http.Rules:" in conftest
    assert 'sakura_http.Scrub.query("key")' in conftest
    assert "the plugin has no ini option for secret query parameters" in result.out


def test_what_cannot_be_translated_is_left_in_place_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conftest = """\
        import pytest


        def scrub(request):
            return request


        @pytest.fixture
        def vcr_config():
            return {"before_record_request": scrub}


        @pytest.fixture
        def vcr_cassette_dir():
            return "elsewhere"
        """
    tests = """\
        import pytest


        @pytest.mark.vcr(match_on=["method"], record_mode="once")
        def test_custom():
            pass


        @pytest.mark.vcr("a.yaml", "b.yaml")
        def test_two():
            pass


        def test_internals(vcr):
            assert vcr.record_mode == "none"
        """
    write(tmp_path, {"tests/conftest.py": conftest, "tests/test_x.py": tests})
    result = run(capsys, "migrate", tmp_path)
    assert result.code == 0, result.err
    out = result.out
    assert (
        "tests/conftest.py: vcr_config left in place: it does not return a dict of literals" in out
    )
    assert "tests/test_x.py::test_custom: left on vcr: its marker sets match_on=" in out
    assert "tests/test_x.py::test_two: left on vcr: its markers name several cassettes" in out
    assert "test_internals" not in out  # not marked: pytest-recording's vcr fixture alone
    assert "tests/conftest.py: a vcr_cassette_dir fixture: its cassettes were looked for" in out
    assert "+++ b/tests/test_x.py" not in out


def test_a_vcr_fixture_read_for_what_it_cannot_view_is_left_and_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        tmp_path,
        {
            "tests/test_x.py": """\
                import pytest


                @pytest.mark.vcr
                def test_internals(vcr):
                    assert vcr.record_mode == "none"
                """,
        },
    )
    result = run(capsys, "migrate", tmp_path)
    assert "the vcr fixture's vcr.record_mode left in place: sakura_cassette gives" in result.out
    assert "+def test_internals(vcr):" not in result.out


def test_sdk_clients_built_in_tests_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        tmp_path,
        {
            "tests/test_llm.py": """\
                import pytest
                from anthropic import Anthropic


                @pytest.mark.vcr
                def test_ask():
                    client = Anthropic(api_key="sk-test", base_url="https://llm.example.test")
                    assert client


                @pytest.mark.vcr
                def test_plain():
                    pass
                """,
        },
    )
    result = run(capsys, "migrate", tmp_path)
    lines = result.out.splitlines()
    at = lines.index(
        "  SDK clients built in the test (patch_clients=True sends them through the cassette):"
    )
    assert lines[at + 1] == "    tests/test_llm.py::test_ask"
    assert "test_plain" not in lines[at + 2]


def test_requests_and_aiohttp_modules_are_covered_other_clients_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """patch_clients covers requests and aiohttp sessions; urllib3 and boto3 need the proxy."""
    body = """\
        import pytest
        import {module}


        @pytest.mark.vcr
        def test_call():
            pass
        """
    write(
        tmp_path,
        {
            "tests/test_req.py": body.format(module="requests"),
            "tests/test_aio.py": body.format(module="aiohttp"),
            "tests/test_s3.py": body.format(module="boto3"),
        },
    )
    out = run(capsys, "migrate", tmp_path).out
    assert "tests/test_s3.py: imports boto3: sakura-http records httpx, httpx2, requests" in out
    assert "imports requests" not in out and "imports aiohttp" not in out


def test_orphan_and_cassetter_files_are_converted_and_listed(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(suite, {"tests/cassettes/test_gone/old.yaml": vcr_yaml(USERS)})
    result = run(capsys, "migrate", suite)
    assert (
        "tests/cassettes/test_gone/old.yaml: no test names it; converted to "
        'tests/fixtures/test_gone/old.jsonl: use @pytest.mark.cassette("test_gone/old.jsonl")'
    ) in result.out


@pytest.mark.parametrize(
    "name",
    [
        "test_a[x/y]",
        "test_a[two words]",
        "test_a[naïve 日本語]",
        "test_a[[nested]]",
        "test_a[http://api.example.test/v1?q=1]",
        "test_a[a/ b]",
        'test_a[say "hi" \\ then go]',
        "test_a[" + "deep/" * 40 + "]",
        "Group.test_b[a:b|c]",
    ],
)
def test_migrate_names_a_cassette_as_the_plugin_looks_for_it(name: str) -> None:
    # pytest-recording's cassette of the test is named by its escapes; migrate moves it to the
    # name the plugin gives the test (`default_cassette_name`), from that file name alone.
    from types import SimpleNamespace

    from pytest_recording.plugin import get_default_cassette_name

    from sakura_http._cassette import cassette_stem
    from sakura_http.pytest_plugin._paths import default_cassette_name

    cls_name, _, test_name = name.rpartition(".") if name.startswith("Group.") else ("", "", name)
    cls = type(cls_name, (), {}) if cls_name else None
    recording_stem = get_default_cassette_name(cls, test_name)
    item = SimpleNamespace(name=test_name, cls=cls, path=Path("tests/test_mod.py"))
    expected = default_cassette_name(item)  # type: ignore[arg-type]
    assert f"test_mod/{cassette_stem(recording_stem)}.jsonl" == expected


def test_migrate_does_not_import_the_cli_package_back() -> None:
    tree = ast.parse(Path(_migrate.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.level == 1 and node.module is None), "from . import ..."
            assert node.module != "sakura_http.cli", node.module


# --- the run and --loosen ----------------------------------------------------------------------


DRIFT = {
    "tests/test_drift.py": """\
        import httpx
        import pytest


        @pytest.mark.vcr
        def test_create_with_tags():
            # Sends a field the recording predates: vcrpy matches on method and URL only.
            response = httpx.post(
                "https://api.example.test/users", json={"name": "Ben", "tags": []}
            )
            assert response.status_code == 201


        @pytest.mark.vcr
        def test_new_endpoint():
            httpx.get("https://api.example.test/never-recorded")


        @pytest.mark.vcr
        def test_wrong():
            assert httpx.get("https://api.example.test/health").text == "not ok"
        """,
    "tests/cassettes/test_drift/test_create_with_tags.yaml": vcr_yaml(CREATE),
    "tests/cassettes/test_drift/test_new_endpoint.yaml": vcr_yaml(HEALTH),
    "tests/cassettes/test_drift/test_wrong.yaml": vcr_yaml(HEALTH),
}


def test_the_run_reports_passed_missed_and_failed(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(suite, DRIFT)
    result = run(capsys, "migrate", "--write", suite)
    assert result.code == 1
    out = result.out
    assert (
        "  missed  tests/test_drift.py::test_create_with_tags (the request drifted: its method "
        "and URL are recorded, its body or headers differ)"
    ) in out
    assert (
        "  missed  tests/test_drift.py::test_new_endpoint (sakura_http.CassetteMiss: GET "
        "https://api.example.test/never-recorded is not in the cassette "
    ) in out
    assert "  failed  tests/test_drift.py::test_wrong (AssertionError" in out
    assert "  passed  tests/test_api.py::test_health" in out
    assert "summary: 1 failed, 2 missed, 3 passed" in out
    assert "--loosen matches them by method and URL" in out


def test_loosen_gives_drifted_tests_method_and_url_rules(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(suite, DRIFT)
    result = run(capsys, "migrate", "--write", "--loosen", suite)
    out = result.out
    assert "  passed  tests/test_drift.py::test_create_with_tags [loosened]" in out
    assert "  missed  tests/test_drift.py::test_new_endpoint (" in out
    code = (suite / "tests/test_drift.py").read_text()
    assert (
        "# sakura-http migrate: this test's request drifted since its cassette was recorded;\n"
        "# to tighten it, run `pytest --record-all` on this test, then remove rules= below.\n"
        "@pytest.mark.cassette(patch_clients=True, rules=sakura_http.Rules.method_and_url())\n"
        "def test_create_with_tags():"
    ) in code
    assert "import sakura_http\n" in code


def test_a_suite_pytest_cannot_run_is_said_so(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (suite / "pytest.ini").write_text("[pytest]\naddopts = --no-such-option\n")
    result = run(capsys, "migrate", "--write", suite)
    assert result.code == 1
    assert result.err.startswith("sakura-http migrate: error: pytest did not run the suite (exit 4")
    assert "the migration is written: fix that, then run pytest" in result.err
    assert (suite / "tests/fixtures/shared.jsonl").is_file()
