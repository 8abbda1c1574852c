"""Load a spec file, check it against specs/spec.schema.json, and return a typed `Spec`.

The JSON Schema is the single source of truth for the format, including defaults. Every
problem is reported as `file:line: path.to.field: message`, all at once, so a user fixes a
spec in one pass.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from assure import samples
from assure.errors import SpecError, unreadable

SCHEMAS = Path(__file__).resolve().parent.parent / "specs"
AGENT_IMAGE_ALIAS = "assure-agent"


@functools.cache
def schema(kind: str = "spec") -> dict[str, Any]:
    """specs/<kind>.schema.json: the one source of truth for a file format (spec, suite)."""
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{kind}.schema.json").read_text())
    return loaded


@dataclass(frozen=True)
class Install:
    """`agent.install`: the agent software built into a derived image (sandbox/install.py)."""

    pip: tuple[str, ...] = ()
    pip_deps: bool = True
    apt: tuple[str, ...] = ()
    wheels: tuple[Path, ...] = ()
    binaries: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Agent:
    image: str
    command: tuple[str, ...]
    env: dict[str, str]
    files: Path | None
    install: Install | None = None
    preset: str | None = None


@dataclass(frozen=True)
class Workspace:
    fixture: Path
    writable: tuple[str, ...]
    protected: tuple[str, ...]


@dataclass(frozen=True)
class Database:
    name: str
    fixture: Path
    mode: str
    rollback: str | None = None  # relative to the spec's folder


@dataclass(frozen=True)
class Limits:
    wall_seconds: float
    memory: str
    tmpfs: str
    disk: str
    inodes: int
    cpus: float
    pids: int
    nofile: int
    tool_calls: int
    tokens: int | None = None
    cost: float | None = None
    # The sizes above in bytes, parsed once here: derived, so neither compared nor written to
    # the spec's JSON (`_plain` skips them; a spec's hash is the same with or without them).
    memory_bytes: int = dataclasses.field(init=False, compare=False, repr=False)
    tmpfs_bytes: int = dataclasses.field(init=False, compare=False, repr=False)
    disk_bytes: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "memory_bytes", parse_size(self.memory))
        object.__setattr__(self, "tmpfs_bytes", parse_size(self.tmpfs))
        object.__setattr__(self, "disk_bytes", parse_size(self.disk))


@dataclass(frozen=True)
class Sandbox:
    user: str
    runtime: str
    read_only_root: bool
    backend: str = "docker"  # a name in sandbox/registry.py (the schema lists them)
    # Not a spec field: an Inspect sample's (assure/inspect/) agent container also gets a
    # /var/tmp where programs may run, for the tools Inspect puts in its sandboxes.
    tools_tmp: bool = False


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    stdin: str | None
    stdout: str
    exit_code: int

    def input_echoes(self) -> bool:
        """The answer is one of the inputs: a program that prints its input back passes."""
        answer = self.stdout.strip()
        inputs = {*self.args, " ".join(self.args), "\n".join(self.args), (self.stdin or "").strip()}
        return bool(answer) and answer in inputs


@dataclass(frozen=True)
class Command:
    """A `command` assertion: `run` in a check container on a copy of POST; passes on exit 0."""

    run: tuple[str, ...]
    image: str
    timeout_seconds: float
    env: dict[str, str]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Command:
        """From a validated spec (defaults filled in)."""
        return cls(
            tuple(data["run"]),
            data["image"],
            float(data["timeout_seconds"]),
            dict(data.get("env", {})),
        )


@dataclass(frozen=True)
class Cases(Command):
    """A black-box `cases` assertion: `run` plus each case's args, compared on the host."""

    each: tuple[Case, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Cases:
        """From a validated spec (defaults filled in)."""
        command = Command.from_json(data)
        each = tuple(
            Case(tuple(c["args"]), c.get("stdin"), c["stdout"], c["exit_code"])
            for c in data["each"]
        )
        return cls(command.run, command.image, command.timeout_seconds, command.env, each)


@dataclass(frozen=True)
class Contract:
    id: str
    proposed_by: str
    scope: tuple[str, ...]
    autonomy_ceiling: str
    irreversible_min_trust: str
    revoked: bool
    ratified_by: str | None = None
    expires_at: str | None = None  # ISO 8601, as written
    terms: dict[str, str] | None = None  # each term's digest, as ratified (`assure contract hash`)
    hash: str | None = None
    trust: dict[str, Any] | None = None  # earned autonomy's policy, defaults filled (records/trust)
    signature: dict[str, str] | None = None  # the ratifier's (`assure contract ratify`)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Contract:
        """From a valid contract block; the schema's defaults fill what it leaves out."""
        c = _with_defaults(data, schema()["properties"]["contract"], schema())
        return cls(
            id=c["id"],
            proposed_by=c["proposed_by"],
            scope=tuple(c["scope"]),
            autonomy_ceiling=c["autonomy_ceiling"],
            irreversible_min_trust=c["irreversible_min_trust"],
            revoked=c["revoked"],
            ratified_by=c.get("ratified_by"),
            expires_at=c.get("expires_at"),
            terms=c.get("terms"),
            hash=c.get("hash"),
            trust=c.get("trust"),
            signature=c.get("signature"),
        )


@dataclass(frozen=True)
class HumanGate:
    id: str
    scope: str
    approved_by: str
    expires_at: str


@dataclass(frozen=True)
class Autonomy:
    dial: str
    verifier_trust: str
    human_gates: tuple[HumanGate, ...]


@dataclass(frozen=True)
class Egress:
    allow: tuple[str, ...]
    upstream: str
    allow_private: bool


def no_egress() -> Egress:
    """An egress block that allows nothing, with the schema's defaults (what a model upstream
    joins)."""
    block = _with_defaults({"allow": []}, schema()["properties"]["egress"], schema())
    return Egress((), block["upstream"], block["allow_private"])


@dataclass(frozen=True)
class Model:
    """The `model` block; file names stay relative to the spec's folder."""

    mode: str
    upstream: str
    allow_http: bool
    key_env: str
    key_file: str | None = None
    recording: str | None = None
    script: str | None = None
    volatile: dict[str, tuple[str, ...]] | None = (
        None  # replay: what matching ignores (None: the gateway's defaults)
    )
    prices: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    allow: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    server_tool_fees: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Alerts:
    webhook: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class Promote:
    target: str  # relative to the spec's folder


Assertion = dict[
    str, Any
]  # one validated assertion: {kind: argument}, checked by verify/assertions.py


@dataclass(frozen=True)
class Task:
    """One move of the goal, with the top-level assertions, contract and retry rules it inherits."""

    id: str
    description: str
    assertions: tuple[Assertion, ...]
    contract: Contract | None
    max_attempts: int
    on_breach: str


@dataclass(frozen=True)
class Sample:
    """Which row of the spec's dataset (assure/samples.py) made this spec, and its fields."""

    id: str
    file: Path
    line: int
    values: dict[str, str]


@dataclass(frozen=True)
class Spec:
    path: Path
    version: int
    name: str
    description: str
    hostile: bool
    agent: Agent
    workspace: Workspace
    databases: tuple[Database, ...]
    limits: Limits
    sandbox: Sandbox
    assertions: tuple[Assertion, ...]
    expect: str
    autonomy: Autonomy
    alerts: Alerts
    max_attempts: int
    on_breach: str
    tasks: tuple[Task, ...]
    contract: Contract | None = None
    egress: Egress | None = None
    promote: Promote | None = None
    model: Model | None = None
    sample: Sample | None = None  # one row of `dataset` filled it in

    @property
    def key(self) -> str:
        """The spec file, and the sample: what tells the specs of a suite apart on disk."""
        return f"{self.path}#{self.sample.id}" if self.sample else str(self.path)

    def to_json(self) -> dict[str, Any]:
        """The resolved spec as JSON (defaults filled in, fixture paths absolute, the spec file
        under `_source`): what a run directory records in `spec.json`; `from_json` reads it back."""
        out: dict[str, Any] = _plain(self)
        out["_source"] = out.pop("path")
        for task, typed in zip(out["tasks"], self.tasks, strict=False):
            task["contract"] = _plain(
                typed.contract
            )  # null: this task has none, whatever the spec's is
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Spec:
        return _build(Path(data["_source"]), data)

    def cases(self) -> tuple[Cases, ...]:
        return tuple(Cases.from_json(a["cases"]) for a in self.assertions if "cases" in a)

    def commands(self) -> tuple[Command, ...]:
        return tuple(Command.from_json(a["command"]) for a in self.assertions if "command" in a)


def _plain(value: Any) -> Any:
    """A typed value as JSON: dataclasses as objects (absent optional fields, and fields derived
    from the others (`init=False`), left out)."""
    if dataclasses.is_dataclass(value):
        return {
            f.name: _plain(v)
            for f in dataclasses.fields(value)
            if f.init and (v := getattr(value, f.name)) is not None
        }
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


SIZE_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30}


def parse_size(text: str) -> int:
    """'64m' -> bytes. The schema guarantees the shape (ValueError for any other)."""
    if not (text[-1:] in SIZE_UNITS and text[:-1].isdigit() and text[0] != "0"):
        raise ValueError(f"not a size (a whole number then k, m or g, as 64m): {text!r}")
    return int(text[:-1]) * SIZE_UNITS[text[-1]]


def load(path: str | Path, sample: str | None = None) -> Spec:
    """Read, validate and resolve one spec (of a spec with a dataset, the `sample` named).
    Raises `SpecError` listing every problem."""
    path = Path(path)
    specs = load_samples(path)
    if specs[0].sample is None:
        return specs[0]
    found = [s for s in specs if s.sample is not None and s.sample.id == sample]
    if found:
        return found[0]
    if sample is None:
        problem = (
            f"{path}:1: dataset: this spec is {len(specs)} samples, one per row of"
            f" {specs[0].sample.file}"
        )
        raise SpecError(
            [problem],
            fix=(
                "list it in a suite (`specs: [...]`) and run that with `assure suite`: it runs"
                " every sample"
            ),
        )
    raise SpecError([f"{path}:1: dataset: no sample {sample!r} in {specs[0].sample.file}"])


def load_samples(path: str | Path) -> tuple[Spec, ...]:
    """Read, validate and resolve a spec: itself, or with a dataset one spec per row (each
    problem said once, with the samples it is in). Raises `SpecError` listing every problem."""
    path = Path(path)
    data, lines = parse_document(path, "spec")
    rows: list[samples.Row | None] = [None]
    dataset = data.get("dataset") if isinstance(data, dict) else None
    if isinstance(dataset, dict) and isinstance(dataset.get("file"), str):
        file = path.resolve().parent / dataset["file"]
        rows, problems = _dataset_rows(path, data, lines, file)
        if problems:
            raise SpecError(problems, fix="see `dataset` in the spec reference (README.md)")
    steps = (
        (lambda d: check_document(path, d, lines, schema(), "spec"), None),
        (
            lambda d: _missing_paths(d, path, lines),
            "paths in a spec are relative to the spec file's folder",
        ),
        (
            lambda d: _disk_problems(d, path, lines),
            "raise limits.disk to that size or more, or lower limits.inodes",
        ),
        (
            lambda d: _echo_cases(d, path, lines),
            (
                "give each case inputs whose expected stdout is none of them (add 40 2 -> 42, not"
                " add 5 0 -> 5)"
            ),
        ),
    )
    documents = [data if row is None else samples.fill(data, row) for row in rows]
    for step, fix in steps:
        said: dict[str, list[str]] = {}
        for n, (row, document) in enumerate(zip(rows, documents, strict=True)):
            try:
                found = step(document)
            except SpecError as exc:
                found, fix = exc.problems, exc.fix
            if isinstance(found, list):  # the schema's check returns the document, defaults filled
                for problem in found:
                    said.setdefault(problem, []).append(row.id if row else "")
            else:
                documents[n] = found
        if said:
            raise SpecError([_in_samples(p, ids, len(rows)) for p, ids in said.items()], fix=fix)
    file = path.resolve().parent / data["dataset"]["file"] if rows[0] else None
    return tuple(
        _build(
            path.resolve(),
            document,
            Sample(row.id, file, row.line, row.values) if row and file else None,
        )
        for row, document in zip(rows, documents, strict=True)
    )


SAMPLES_NAMED = 5  # samples a problem names before it counts the rest


def _in_samples(problem: str, ids: list[str], total: int) -> str:
    """A problem of some samples, said once: `... (samples a, b and 3 more)`, `(every sample)`."""
    if ids == [""]:
        return problem
    if len(ids) == total and total > 1:
        return f"{problem} (every sample)"
    named = ", ".join(ids[:SAMPLES_NAMED]) + (
        f" and {len(ids) - SAMPLES_NAMED} more" if len(ids) > SAMPLES_NAMED else ""
    )
    return f"{problem} (sample{'s' if len(ids) > 1 else ''} {named})"


def _dataset_rows(
    path: Path, data: dict[str, Any], lines: dict[tuple[Any, ...], int], file: Path
) -> tuple[list[samples.Row | None], list[str]]:
    """The dataset's rows, and every problem: the file's own, and each placeholder of the spec
    that a row does not fill (at the spec's line, naming the rows)."""
    rows, problems = samples.read(file)
    used = samples.placeholders(data)
    for field, at in sorted(used.items(), key=lambda item: line_of(item[1], lines)):
        lacking = [r for r in rows if field not in r.values]
        if lacking:
            where = ", ".join(str(r.line) for r in lacking[:SAMPLES_NAMED]) + (
                f" and {len(lacking) - SAMPLES_NAMED} more" if len(lacking) > SAMPLES_NAMED else ""
            )
            problems.append(
                f"{path}:{line_of(at, lines)}: {_dotted(at)}: {{{{{field}}}}} is no field of "
                f"{file.name}" + ("" if len(lacking) == len(rows) else f" line {where}")
            )
    return list(rows), problems


def read_document(
    path: Path, against: dict[str, Any], kind: str
) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """A YAML file checked against a JSON Schema, with the schema's defaults filled in, and
    the line of every value (see `line_of`). Raises `SpecError` listing every problem."""
    data, lines = parse_document(path, kind)
    return check_document(path, data, lines, against, kind), lines


def document_of(spec: Spec) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """The loaded spec's document as its file and its dataset row give it (defaults filled in),
    and the line of every value: where a later check points (`run/preflight.py`)."""
    data, lines = parse_document(spec.path, "spec")
    if spec.sample is not None:
        s = spec.sample
        data = samples.fill(data, samples.Row(s.line, s.id, s.values))
    return _with_defaults(data, schema(), schema()), lines


def parse_document(path: Path, kind: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """A YAML file as data, and the line of every value (see `line_of`); not checked but for
    duplicate keys and being the other kind of file. Raises `SpecError` listing every problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            [f"{path}: cannot read the {kind}: {unreadable(exc)}"],
            fix=f"pass the path of a YAML {kind} file (UTF-8 text)",
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise SpecError(
            [f"{path}:{line}: (document): not valid YAML: {getattr(exc, 'problem', exc)}"]
        ) from exc
    other = {
        "spec": ("suite", "specs", "agent", "assure suite"),
        "suite": ("spec", "agent", "specs", "assure run"),
    }.get(kind)
    if (
        other and isinstance(data, dict) and other[1] in data and other[2] not in data
    ):  # the other kind of file: say so, not its schema errors
        raise SpecError(
            [f"{path}:1: (document): this is a {other[0]} (it has `{other[1]}:`), not a {kind}"],
            fix=f"run it with `{other[3]} {path}`",
        )
    lines: dict[tuple[Any, ...], int] = {}
    problems = [
        f"{path}:{line}: {_dotted(p)}: duplicate key" for p, line in _index(node, (), lines)
    ]
    if problems:
        raise SpecError(
            problems, fix=f"see the {kind} reference in README.md or specs/{kind}.schema.json"
        )
    return data, lines


def check_document(
    path: Path, data: Any, lines: dict[tuple[Any, ...], int], against: dict[str, Any], kind: str
) -> Any:
    """The document checked against a JSON Schema, with the schema's defaults filled in.
    Raises `SpecError` listing every problem."""
    problems = [
        f"{path}:{line}: {where}: {msg}"
        for line, where, msg in _schema_problems(data, lines, against, kind)
    ]
    if problems:
        raise SpecError(
            problems, fix=f"see the {kind} reference in README.md or specs/{kind}.schema.json"
        )
    return _with_defaults(data, against, against)


def _index(
    node: yaml.Node | None, at: tuple[Any, ...], lines: dict[tuple[Any, ...], int]
) -> list[tuple[tuple[Any, ...], int]]:
    """Record the line of every value (and of every key, under a `('key',)` suffix); return
    duplicates."""
    dupes: list[tuple[tuple[Any, ...], int]] = []
    if node is None:
        return dupes
    lines.setdefault(at, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                dupes.append((at + (key,), key_node.start_mark.line + 1))
            seen.add(key)
            lines[at + (key, "key")] = key_node.start_mark.line + 1
            dupes += _index(value_node, at + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            dupes += _index(item, at + (i,), lines)
    return dupes


def _schema_problems(
    data: Any, lines: dict[tuple[Any, ...], int], against: dict[str, Any], kind: str
) -> list[tuple[int, str, str]]:
    if against.get("type", "object") == "object" and not isinstance(
        data, dict
    ):  # nothing below the top makes sense then: one problem, in words
        fields = ", ".join(against.get("required", []))
        what = "the file is empty" if data is None else f"the file holds {_kind_of(data)}"
        return [
            (
                1,
                "(document)",
                f"{what}: a {kind} is a mapping with the fields {fields} (and optional ones)",
            )
        ]
    validator = jsonschema.Draft202012Validator(against)
    out: list[tuple[int, str, str]] = []
    for error in validator.iter_errors(data):
        at = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = sorted(error.schema.get("properties", {}))
            for key in sorted(set(error.instance) - set(allowed), key=str):
                line = lines.get(at + (key, "key"), lines.get(at, 1))
                out.append(
                    (
                        line,
                        _dotted(at + (key,)),
                        f"unknown field; allowed here: {', '.join(allowed)}",
                    )
                )
            continue
        out.append((line_of(at, lines), _dotted(at), _message(error)))
    return sorted(set(out))


TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "nothing",
}


def _message(error: jsonschema.ValidationError) -> str:
    """The schema's complaint in words: no Python repr of a value (None, {...}, [...]) reaches a
    user."""
    v = error.validator
    value: Any = error.validator_value  # the keyword's value in the schema (JSON)
    instance: Any = error.instance  # the value that failed it (YAML as read)
    described = (
        error.schema.get("description", "see the schema")
        if isinstance(error.schema, Mapping)
        else "see the schema"
    )
    if v == "type" and isinstance(instance, datetime.date):
        written = instance.isoformat().replace("+00:00", "Z")
        return f'quote the timestamp ("{written}"): YAML read it as a date'
    if v == "required":
        return error.message.replace("is a required property", "is required")
    if v in ("minProperties", "maxProperties") and "assertion" in str(error.schema_path):
        return "an assertion has exactly one kind, e.g. `- file_exists: out/result.txt`"
    if v == "pattern" or v == "not":
        return f"{_shown(instance)} is not allowed here ({described})"
    if v == "type":
        wanted = [value] if isinstance(value, str) else list(value)
        return (
            f"expected {' or '.join(TYPE_WORDS.get(t, t) for t in wanted)}, found"
            f" {_kind_of(instance)}"
        )
    if v == "enum":
        return f"{_shown(instance)} is not one of: {', '.join(_shown(x) for x in value)}"
    if v == "const":
        return f"must be {_shown(value)}, not {_shown(instance)}"
    if v in ("minItems", "minLength") and value == 1:
        return "must not be empty"
    if v == "minItems":
        return f"needs at least {value} items, has {len(instance)}"
    if v == "maxItems":
        return f"takes at most {value} items, has {len(instance)}"
    if v == "uniqueItems":
        twice: list[Any] = []
        for i, x in enumerate(instance):
            if x in instance[:i] and x not in twice:
                twice.append(x)
        return f"lists {', '.join(_shown(x) for x in twice)} more than once"
    if v in ("anyOf", "oneOf"):
        many = v == "oneOf" and "is valid under each of" in error.message
        return (
            "matches more than one of the allowed forms"
            if many
            else "matches none of the allowed forms"
        ) + f" ({described})"
    if isinstance(instance, (dict, list)) or instance is None:
        return error.message.replace(repr(instance), _kind_of(instance), 1)
    return error.message


def _kind_of(value: Any) -> str:
    """What a YAML value is, in words."""
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, bool):
        return f"true or false ({_shown(value)})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"text ({_shown(value)})"
    return "a list" if isinstance(value, list) else "a mapping"


def _shown(value: Any) -> str:
    """A scalar as a user would spell it (text quoted, controls escaped); a list or mapping in
    words."""
    if isinstance(value, (dict, list)) or value is None:
        return _kind_of(value)
    return json.dumps(value) if isinstance(value, bool) else repr(value)


def line_of(at: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int:
    """The line of the value at `at`, or of the nearest enclosing one."""
    while at not in lines and at:
        at = at[:-1]
    return lines.get(at, 1)


def _dotted(at: tuple[Any, ...]) -> str:
    out = ""
    for part in at:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (`#/a/b` in `root`) one level; sibling keywords win."""
    if "$ref" not in node:
        return node
    target: Any = root
    for part in node["$ref"].lstrip("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _with_defaults(data: Any, node: dict[str, Any], root: dict[str, Any]) -> Any:
    """Fill the schema's `default`s into objects, recursively, without touching given values."""
    node = _resolve(node, root)
    if isinstance(data, dict) and "properties" in node:
        out = dict(data)
        for key, sub in node["properties"].items():
            sub = _resolve(sub, root)
            if key not in out:
                if (
                    sub.get("type") == "object"
                    and not sub.get("required")
                    and any(
                        "default" in _resolve(p, root) for p in sub.get("properties", {}).values()
                    )
                ):
                    out[key] = _with_defaults({}, sub, root)
                elif "default" in sub:
                    out[key] = sub["default"]
            else:
                out[key] = _with_defaults(out[key], sub, root)
        return out
    if isinstance(data, list) and isinstance(node.get("items"), dict):
        return [_with_defaults(item, node["items"], root) for item in data]
    return data


def _missing_paths(
    data: dict[str, Any], path: Path, lines: dict[tuple[Any, ...], int]
) -> list[str]:
    base = path.resolve().parent
    wanted: list[tuple[tuple[Any, ...], str, bool]] = [
        (("workspace", "fixture"), data["workspace"]["fixture"], True)
    ]
    if data["agent"].get("files"):
        wanted.append((("agent", "files"), data["agent"]["files"], True))
    wanted += [
        (("databases", i, "fixture"), db["fixture"], False)
        for i, db in enumerate(data.get("databases", []))
    ]
    problems = []
    for at, rel, is_dir in wanted:
        target = base / rel
        ok = target.is_dir() if is_dir else target.is_file()
        if not ok:
            kind = "folder" if is_dir else "file"
            problems.append(f"{path}:{line_of(at, lines)}: {_dotted(at)}: no such {kind}: {target}")
    return problems


MIN_DISK = 8 * 2**20
INODE_BYTES = 256  # ext4's inode size: the inode tables take inodes * this of the disk


def min_disk(inodes: int) -> int:
    """The smallest limits.disk for `inodes`, rounded up to whole MiB: MIN_DISK, and twice the
    inode tables (the filesystem keeps at least half of it for data)."""
    return max(MIN_DISK, -(-2 * inodes * INODE_BYTES // 2**20) * 2**20)


def _disk_problems(
    data: dict[str, Any], path: Path, lines: dict[tuple[Any, ...], int]
) -> list[str]:
    """The workspace filesystem must exist and keep at least half of it for data: one message
    with the true minimum (never `below 8m` for a size then refused for its inode tables)."""
    disk, inodes = parse_size(data["limits"]["disk"]), data["limits"]["inodes"]
    if disk >= MIN_DISK and inodes * INODE_BYTES <= disk // 2:
        return []
    least = min_disk(inodes)
    at = ("limits", "disk") if ("limits", "disk") in lines else ("limits", "inodes")
    return [
        f"{path}:{line_of(at, lines)}: {_dotted(at)}: a workspace filesystem with limits.inodes"
        f" {inodes} needs limits.disk {least // 2**20}m or more, not {data['limits']['disk']} (at"
        f" least {MIN_DISK // 2**20}m, and twice the inode tables: {inodes} x {INODE_BYTES} bytes)"
    ]


def _echo_cases(data: dict[str, Any], path: Path, lines: dict[tuple[Any, ...], int]) -> list[str]:
    """Black-box cases that a program printing its own input would pass prove nothing."""
    problems = []
    lists = [(("assertions",), data["assertions"])] + [
        (("tasks", t, "assertions"), task["assertions"])
        for t, task in enumerate(data.get("tasks", []))
        if "assertions" in task
    ]
    for at, items in lists:
        for n, assertion in enumerate(items):
            for i, case in enumerate(
                Cases.from_json(assertion["cases"]).each if "cases" in assertion else ()
            ):
                if case.input_echoes():
                    where = at + (n, "cases", "each", i, "stdout")
                    problems.append(
                        f"{path}:{line_of(where, lines)}: {_dotted(where)}: the expected stdout is"
                        " one of the case's inputs: a program that echoes its input passes"
                    )
    return problems


def _build(path: Path, data: dict[str, Any], sample: Sample | None = None) -> Spec:
    """The typed spec of a validated document (defaults filled in); paths are resolved against
    the spec's folder (an absolute one, as `to_json` writes, stays as it is)."""
    from assure import presets

    if sample is None and isinstance(data.get("sample"), dict):  # as `to_json` wrote it
        given = data["sample"]
        sample = Sample(given["id"], Path(given["file"]), given["line"], dict(given["values"]))

    base = path.parent
    data = presets.expand(data)
    a, w, lim, sb, au = (
        data["agent"],
        data["workspace"],
        data["limits"],
        data["sandbox"],
        data["autonomy"],
    )
    ins = a.get("install")
    contract = Contract.from_json(data["contract"]) if data.get("contract") else None
    tasks = data.get("tasks") or [{"id": "main", "description": data.get("description", "")}]
    eg, m, al = data.get("egress"), data.get("model"), data.get("alerts", {})
    return Spec(
        path=path,
        version=data["version"],
        name=data["name"],
        description=data.get("description", ""),
        hostile=data["hostile"],
        agent=Agent(
            a["image"],
            tuple(a["command"]),
            dict(a.get("env", {})),
            base / a["files"] if a.get("files") else None,
            (
                Install(
                    tuple(ins.get("pip", ())),
                    ins.get("pip_deps", True),
                    tuple(ins.get("apt", ())),
                    tuple(base / p for p in ins.get("wheels", ())),
                    tuple(base / p for p in ins.get("binaries", ())),
                )
                if ins
                else None
            ),
            a.get("preset"),
        ),
        workspace=Workspace(base / w["fixture"], tuple(w["writable"]), tuple(w["protected"])),
        databases=tuple(
            Database(d["name"], base / d["fixture"], d["mode"], d.get("rollback"))
            for d in data.get("databases", [])
        ),
        limits=Limits(
            wall_seconds=float(lim["wall_seconds"]),
            memory=lim["memory"],
            tmpfs=lim["tmpfs"],
            disk=lim["disk"],
            inodes=lim["inodes"],
            cpus=float(lim["cpus"]),
            pids=lim["pids"],
            nofile=lim["nofile"],
            tool_calls=lim["tool_calls"],
            tokens=lim.get("tokens"),
            cost=float(lim["cost"]) if lim.get("cost") is not None else None,
        ),
        sandbox=Sandbox(
            sb["user"],
            sb["runtime"],
            sb["read_only_root"],
            backend=sb.get("backend", "docker"),
            tools_tmp=sb.get("tools_tmp", False),
        ),
        assertions=tuple(data["assertions"]),
        expect=data["expect"],
        autonomy=Autonomy(
            au["dial"],
            au["verifier_trust"],
            tuple(HumanGate(**g) for g in au.get("human_gates", [])),
        ),
        alerts=Alerts(al.get("webhook"), al.get("file")),
        max_attempts=data["max_attempts"],
        on_breach=data["on_breach"],
        tasks=tuple(
            Task(
                id=t["id"],
                description=t.get("description", ""),
                assertions=tuple(t.get("assertions", data["assertions"])),
                contract=(
                    (t["contract"] and Contract.from_json(t["contract"]))
                    if "contract" in t
                    else contract
                ),
                max_attempts=t.get("max_attempts", data["max_attempts"]),
                on_breach=t.get("on_breach", data["on_breach"]),
            )
            for t in tasks
        ),
        contract=contract,
        egress=Egress(tuple(eg["allow"]), eg["upstream"], eg["allow_private"]) if eg else None,
        promote=Promote(data["promote"]["target"]) if data.get("promote") else None,
        model=(
            Model(
                mode=m["mode"],
                upstream=m["upstream"],
                allow_http=m["allow_http"],
                key_env=m["key_env"],
                key_file=m.get("key_file"),
                recording=m.get("recording"),
                script=m.get("script"),
                volatile=(
                    {k: tuple(v) for k, v in m["volatile"].items()} if "volatile" in m else None
                ),
                prices={k: dict(v) for k, v in m.get("prices", {}).items()},
                allow={k: tuple(v) for k, v in m.get("allow", {}).items()},
                server_tool_fees=dict(m.get("server_tool_fees", {})),
            )
            if m
            else None
        ),
        sample=sample,
    )
