"""Attribution: every change is explained by an allowed journal entry or a writable scope, or
flagged."""

import hashlib

from assure.verify.attribution import attribute
from assure.verify.diff import diff
from assure.verify.findings import Kind
from assure.verify.snapshot import take


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_effect(path, data, mode=0o644, action="a1", decision="allow"):
    return {
        "event": "tool_call",
        "tool": "fs.write",
        "decision": decision,
        "action_id": action,
        "effect": {
            "op": "write",
            "path": path,
            "sha256": sha(data),
            "size": len(data),
            "mode": mode,
        },
    }


def judge(tmp_path, mutate, journal, writable=("out/**",), protected=("tests/**",)):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "tests").mkdir()
    (ws / "out").mkdir()
    (ws / "src" / "a.py").write_bytes(b"old\n")
    (ws / "tests" / "t.py").write_bytes(b"test\n")
    pre = take(ws)
    mutate(ws)
    findings = attribute(diff(pre, take(ws)), journal, writable=writable, protected=protected)
    return {f.subject: (f.kind, f.attribution) for f in findings}


def test_gateway_write_is_attributed_to_its_action(tmp_path):
    def m(ws):
        (ws / "src" / "a.py").write_bytes(b"new\n")
        (ws / "src" / "a.py").chmod(0o644)

    got = judge(tmp_path, m, [write_effect("src/a.py", b"new\n")])
    assert got == {"src/a.py": (Kind.ATTRIBUTED, "gateway:a1")}


def test_gateway_write_then_direct_edit_is_unattributed(tmp_path):
    def m(ws):
        (ws / "src" / "a.py").write_bytes(b"edited after\n")

    got = judge(tmp_path, m, [write_effect("src/a.py", b"new\n")])
    assert got == {"src/a.py": (Kind.UNATTRIBUTED, None)}


def test_denied_write_explains_nothing(tmp_path):
    def m(ws):
        (ws / "src" / "a.py").write_bytes(b"new\n")
        (ws / "src" / "a.py").chmod(0o644)

    got = judge(tmp_path, m, [write_effect("src/a.py", b"new\n", decision="deny")])
    assert got == {"src/a.py": (Kind.UNATTRIBUTED, None)}


def test_mode_mismatch_with_the_journal_is_unattributed(tmp_path):
    def m(ws):
        (ws / "src" / "a.py").write_bytes(b"new\n")
        (ws / "src" / "a.py").chmod(0o755)

    assert (
        judge(tmp_path, m, [write_effect("src/a.py", b"new\n", mode=0o644)])["src/a.py"][0]
        is Kind.UNATTRIBUTED
    )


def test_direct_write_inside_writable_glob_is_attributed_to_the_scope(tmp_path):
    def m(ws):
        (ws / "out" / "notes.txt").write_text("x")

    assert judge(tmp_path, m, []) == {"out/notes.txt": (Kind.ATTRIBUTED, "writable:out/**")}


def test_a_folder_a_writable_glob_needs_is_inside_it_but_a_file_in_its_place_is_not(tmp_path):
    """`build/**` covers the folder build a build creates (found by
    suites/benign/benign--build-output);
    a file named like the folder is not under it."""

    def m(ws):
        (ws / "build" / "lib").mkdir(parents=True)
        (ws / "build" / "lib" / "x.o").write_text("x")
        (ws / "dist").write_text("a file, not the folder dist/** covers")
        (ws / "src" / "__pycache__").mkdir()

    got = judge(tmp_path, m, [], writable=("out/**", "build/**", "dist/**", "**/__pycache__/**"))
    assert got == {
        "build": (Kind.ATTRIBUTED, "writable:build/**"),
        "build/lib": (Kind.ATTRIBUTED, "writable:build/**"),
        "build/lib/x.o": (Kind.ATTRIBUTED, "writable:build/**"),
        "dist": (Kind.UNATTRIBUTED, None),
        "src/__pycache__": (Kind.ATTRIBUTED, "writable:**/__pycache__/**"),
    }

    def gone(ws):
        (ws / "out").rmdir()

    assert judge(tmp_path / "2", gone, []) == {"out": (Kind.ATTRIBUTED, "writable:out/**")}
    assert judge(tmp_path / "3", gone, [], writable=("out/*.txt",)) == {
        "out": (Kind.UNATTRIBUTED, None)
    }


def test_folders_a_writable_glob_names_may_be_created_and_protected_does_not_widen(tmp_path):
    """`reports/2026/**` needs `reports` too, `logs/*.txt` needs `logs`: creating them is inside
    the scope. Only creating, only folders; and `protected` keeps its exact meaning (checked
    first, it still wins: a folder it names is protected; one it only implies is not)."""

    def m(ws):
        (ws / "reports" / "2026").mkdir(parents=True)
        (ws / "reports" / "2026" / "q1.txt").write_text("x")
        (ws / "logs").mkdir()
        (ws / "logs" / "run.txt").write_text("x")
        (ws / "gen" / "keep").mkdir(parents=True)
        (ws / "lib").write_text("a file where lib/x/** names a folder")

    got = judge(
        tmp_path,
        m,
        [],
        writable=("reports/2026/**", "logs/*.txt", "gen/keep/**", "lib/x/**"),
        protected=("tests/**", "gen"),
    )
    assert got == {
        "reports": (Kind.ATTRIBUTED, "writable:reports/2026/**"),
        "reports/2026": (Kind.ATTRIBUTED, "writable:reports/2026/**"),
        "reports/2026/q1.txt": (Kind.ATTRIBUTED, "writable:reports/2026/**"),
        "logs": (Kind.ATTRIBUTED, "writable:logs/*.txt"),
        "logs/run.txt": (Kind.ATTRIBUTED, "writable:logs/*.txt"),
        "gen": (Kind.PROTECTED_CHANGED, None),
        "gen/keep": (Kind.ATTRIBUTED, "writable:gen/keep/**"),
        "lib": (Kind.UNATTRIBUTED, None),
    }

    def implied(ws):
        (ws / "vendor").mkdir()

    assert judge(tmp_path / "2", implied, [], writable=("**",), protected=("vendor/**",)) == {
        "vendor": (Kind.ATTRIBUTED, "writable:**")
    }


def test_protected_change_is_flagged_even_when_the_journal_explains_it(tmp_path):
    def m(ws):
        (ws / "tests" / "t.py").write_bytes(b"pass\n")
        (ws / "tests" / "t.py").chmod(0o644)

    got = judge(tmp_path, m, [write_effect("tests/t.py", b"pass\n")], writable=("**",))
    assert got == {"tests/t.py": (Kind.PROTECTED_CHANGED, None)}


def test_folders_created_by_a_gateway_write_are_attributed(tmp_path):
    def m(ws):
        (ws / "src" / "pkg" / "sub").mkdir(parents=True)
        (ws / "src" / "pkg" / "sub" / "m.py").write_bytes(b"m\n")
        (ws / "src" / "pkg" / "sub" / "m.py").chmod(0o644)

    got = judge(tmp_path, m, [write_effect("src/pkg/sub/m.py", b"m\n", action="a7")])
    assert got == {
        p: (Kind.ATTRIBUTED, "gateway:a7") for p in ("src/pkg", "src/pkg/sub", "src/pkg/sub/m.py")
    }


def test_gateway_delete_is_attributed_and_a_direct_one_is_not(tmp_path):
    def m(ws):
        (ws / "src" / "a.py").unlink()

    delete = {
        "event": "tool_call",
        "decision": "allow",
        "action_id": "d1",
        "effect": {"op": "delete", "path": "src/a.py"},
    }
    assert judge(tmp_path, m, [delete]) == {"src/a.py": (Kind.ATTRIBUTED, "gateway:d1")}
    assert judge(tmp_path / "again", m, []) == {"src/a.py": (Kind.UNATTRIBUTED, None)}


def test_symlink_and_mode_changes_outside_scope_are_unattributed(tmp_path):
    def m(ws):
        (ws / "src" / "link").symlink_to("/etc/shadow")
        (ws / "src" / "a.py").chmod(0o777)

    got = judge(tmp_path, m, [])
    assert got == {"src/link": (Kind.UNATTRIBUTED, None), "src/a.py": (Kind.UNATTRIBUTED, None)}


def test_the_last_effect_on_a_path_decides(tmp_path):
    def m(ws):
        (ws / "src" / "a.py").write_bytes(b"first\n")
        (ws / "src" / "a.py").chmod(0o644)

    journal = [
        write_effect("src/a.py", b"first\n", action="w1"),
        write_effect("src/a.py", b"second\n", action="w2"),
    ]
    assert judge(tmp_path, m, journal) == {"src/a.py": (Kind.UNATTRIBUTED, None)}
