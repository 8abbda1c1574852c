"""Suite files: every problem (in the suite or in a spec it names) as file:line: field: message;
a suite run's record, and which unfinished record a second command continues."""

from pathlib import Path

import pytest

from assure.errors import SpecError
from assure.records import store
from assure.run import suite

ROOT = Path(__file__).resolve().parents[2]

SPEC = """\
version: 1
name: {name}
agent:
  command: [sh, -c, "true"]
workspace:
  fixture: ws
assertions: []
expect: {expect}
"""


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    for name, expect in (("one", "pass"), ("two", "breach")):
        (tmp_path / f"{name}.yaml").write_text(SPEC.format(name=name, expect=expect))
    return tmp_path


def write_suite(folder: Path, text: str) -> Path:
    path = folder / "s.yaml"
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        suite.load(path)
    return info.value.problems


def test_the_shipped_suites_load() -> None:
    names = {
        p.stem: [s.name for s in suite.load(p).specs] for p in (ROOT / "suites").glob("*.yaml")
    }
    corpus = sorted(
        (ROOT / "suites" / "containment").glob("*.yaml")
    )  # <category>--<short>.yaml holds <category>-<short>
    assert names["containment"] == [p.stem.replace("--", "-", 1) for p in corpus] + [
        "escape",
        "network",
    ]
    assert names["demo"] == ["benign", "escape", "network", "claude-fix-bug-scripted"]


def test_a_suite_loads_its_specs_in_order_with_defaults(specs: Path) -> None:
    loaded = suite.load(write_suite(specs, "version: 1\nname: s\nspecs: [two.yaml, one.yaml]\n"))
    assert [(s.name, s.expect) for s in loaded.specs] == [("two", "breach"), ("one", "pass")]
    assert loaded.stop_on_unexpected is False and loaded.path == (specs / "s.yaml").resolve()


def test_every_problem_is_named_with_its_line(specs: Path) -> None:
    (specs / "bad.yaml").write_text(SPEC.format(name="bad", expect="maybe"))
    path = write_suite(
        specs,
        "version: 1\nname: s\nspecs:\n  - one.yaml\n  - missing.yaml\n  - bad.yaml\ncolour: red\n",
    )

    found = problems(path)

    assert (
        found[0]
        == f"{path}:7: colour: unknown field; allowed here: description, epochs, name, pool, specs,"
        " stop_on_unexpected, version"
    )
    path.write_text("version: 1\nname: s\nspecs:\n  - one.yaml\n  - missing.yaml\n  - bad.yaml\n")
    found = problems(path)
    assert found[0] == f"{path}:5: specs[1]: no such file: {specs / 'missing.yaml'}"
    assert found[1].startswith(f"{specs / 'bad.yaml'}:8: expect: ")


def test_an_empty_or_repeated_list_is_refused(specs: Path) -> None:
    assert problems(write_suite(specs, "version: 1\nname: s\nspecs: []\n"))[0].endswith(
        "specs: must not be empty"
    )
    assert (
        "lists 'one.yaml' more than once"
        in problems(write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml, one.yaml]\n"))[0]
    )


def test_the_digest_follows_the_specs_so_a_changed_spec_starts_a_new_suite_run(
    specs: Path, tmp_path: Path
) -> None:
    path = write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml, two.yaml]\n")
    base = tmp_path / "suites"
    record = suite.SuiteRun.create(base, suite.load(path))

    assert suite.SuiteRun.find_unfinished(base, suite.load(path)).path == record.path
    (specs / "two.yaml").write_text(SPEC.format(name="two", expect="fail"))
    assert suite.SuiteRun.find_unfinished(base, suite.load(path)) is None


def test_a_suite_run_records_each_run_before_it_starts_and_skips_finished_ones(
    specs: Path, tmp_path: Path
) -> None:
    loaded = suite.load(write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml, two.yaml]\n"))
    runs, base = tmp_path / "runs", tmp_path / "suites"
    record = suite.SuiteRun.create(base, loaded)
    seen: list[str] = []

    def killed_in_the_second(spec, run: store.RunDir) -> str:
        assert (
            store.read_json(record.path / "state.json")["runs"][len(seen)]["run_id"] == run.run_id
        )  # written first
        seen.append(run.run_id)
        if spec.name == "two":
            raise KeyboardInterrupt
        return "pass"

    with pytest.raises(KeyboardInterrupt):
        record.drive(runs, killed_in_the_second, lambda n, spec: None)
    again = suite.SuiteRun.find_unfinished(base, loaded)
    assert again is not None and again.path == record.path
    resumed: list[str] = []
    outcomes = again.drive(
        runs, lambda spec, run: resumed.append(run.run_id) or "fail", lambda n, spec: None
    )

    assert (
        resumed == seen[1:]
    )  # the finished run is not driven again; the interrupted one is, under its own id
    assert [(o.spec, o.run_id, o.verdict, o.as_expected) for o in outcomes] == [
        ("one", seen[0], "pass", True),
        ("two", seen[1], "fail", False),
    ]
    assert store.read_json(record.path / "state.json")["state"] == "finished"
    assert suite.SuiteRun.find_unfinished(base, loaded) is None


def test_validate_takes_suites_and_specs_alike(specs: Path) -> None:
    import subprocess
    import sys

    good = write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml]\n")
    bad = specs / "bad-suite.yaml"
    bad.write_text("version: 1\nname: s\nspecs: [one.yaml, gone.yaml]\n")
    assert suite.is_suite(good) and not suite.is_suite(specs / "one.yaml")

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "assure.cli",
            "validate",
            str(good),
            str(specs / "one.yaml"),
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert done.stdout.split() == ["ok", str(good), "ok", str(specs / "one.yaml")]
    assert f"{bad}:3: specs[1]: no such file: {specs / 'gone.yaml'}" in done.stderr


def test_a_glob_names_every_matching_spec_in_name_order_and_a_glob_that_matches_nothing_is_refused(
    specs: Path,
) -> None:
    (specs / "corpus").mkdir()
    for name in ("b-two", "a-one"):
        (specs / "corpus" / f"{name}.yaml").write_text(
            SPEC.format(name=name, expect="pass").replace("fixture: ws", "fixture: ../ws")
        )
    loaded = suite.load(
        write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml, 'corpus/*.yaml']\n")
    )
    assert [s.name for s in loaded.specs] == ["one", "a-one", "b-two"]
    path = write_suite(specs, "version: 1\nname: s\nspecs: ['none/*.yaml']\n")
    assert problems(path) == [f"{path}:3: specs[0]: no such file: {specs / 'none/*.yaml'}"]


def test_two_specs_with_one_name_are_refused(specs: Path) -> None:
    (specs / "again.yaml").write_text(SPEC.format(name="one", expect="pass"))
    path = write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml, again.yaml]\n")
    with pytest.raises(SpecError) as info:
        suite.load(path)
    assert info.value.problems == [
        f"{path}: specs: two specs are named `one` ({specs / 'one.yaml'}, {specs / 'again.yaml'}): "
        "a suite's report tells its specs apart by name"
    ]
    assert (
        info.value.fix == "give each spec of the suite a `name:` of its own"
    )  # not a hint about relative paths


def test_a_spec_given_as_a_suite_and_a_suite_given_as_a_spec_say_which_command_runs_them(
    specs: Path,
) -> None:
    from assure import spec as spec_mod

    path = write_suite(specs, "version: 1\nname: s\nspecs: [one.yaml]\n")
    with pytest.raises(SpecError) as info:
        spec_mod.load(path)
    assert info.value.problems == [
        f"{path}:1: (document): this is a suite (it has `specs:`), not a spec"
    ]
    assert info.value.fix == f"run it with `assure suite {path}`"
    with pytest.raises(SpecError) as info:
        suite.load(specs / "one.yaml")
    assert info.value.problems == [
        f"{specs / 'one.yaml'}:1: (document): this is a spec (it has `agent:`), not a suite"
    ]
    assert info.value.fix == f"run it with `assure run {specs / 'one.yaml'}`"


def test_an_expected_breach_the_summary_finds_unexpected_is_unexpected_in_the_table_and_exit_code() -> (  # noqa: E501 -- the test's name says what it checks
    None
):
    """The summary (from the run directories) judges a breach with a containment failure unexpected
    (`findings.as_expected`): so does the outcome the table and the exit code read."""
    covert = suite.Outcome("covert", "r1", "breach", "breach")
    escaped = suite.Outcome("escaped", "r2", "breach", "breach")
    missed = suite.Outcome("missed", "r3", "contained", "breach")
    doc = {
        "results": [
            {"run_id": "r1", "as_expected": True},
            {"run_id": "r2", "as_expected": False},
            {"run_id": "r3", "as_expected": False},
        ]
    }
    assert [o.as_expected for o in suite.with_findings([covert, escaped, missed], doc)] == [
        True,
        False,
        False,
    ]
