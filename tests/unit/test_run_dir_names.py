"""The run directory's names are spelled in records/layout.py alone (issue 23 item 4): a file
name of layout's, or one of its folder names joined into a path with `/`, anywhere else in
assure/ fails here, naming the place."""

import ast
from pathlib import Path

from assure.records import layout

ROOT = Path(__file__).resolve().parents[2] / "assure"
# core/ and gateway/ run in the gateway's image, which carries no records/: layout takes their
# names from them (control.OPERATOR_LOG), so they spell their own
OWN_NAMES = ("core", "gateway")
NAMES = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and v}
# a name with a dot or a slash is a file name wherever it is spelled; a bare word ("attempts",
# "control") is also a JSON key, so it counts only where it is joined into a path
FILES = {n for n in NAMES if "." in n or "/" in n} | {
    part for n in NAMES if "/" in n for part in n.split("/") if "." in part
}


def spelled(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split("/")
            # a file name, or a folder name inside a relative path ("{run}/attempts/{n}")
            # (prose, a docstring or a help text, has spaces: it may say where things are)
            path_like = not any(c.isspace() for c in node.value)
            if node.value in FILES or (path_like and len(parts) > 1 and NAMES.intersection(parts)):
                found.append((node.lineno, node.value))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value in NAMES:
                    found.append((side.lineno, str(side.value)))
    return found


def offenders() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.as_posix() == "records/layout.py" or rel.parts[0] in OWN_NAMES:
            continue
        for line, name in spelled(ast.parse(path.read_text(), str(path))):
            found.setdefault(rel.as_posix(), []).append(f"{line}: {name!r}")
    return found


def test_no_module_but_layout_spells_a_run_directory_name():
    # no exceptions: a reader of an untrusted tree takes relative names (layout.RelativeRun),
    # a glob layout.journals_glob / EVENTS_GLOB, a place in a container another name
    assert offenders() == {}


def test_the_check_finds_a_spelled_name():
    assert spelled(ast.parse('p = run / "attempts" / "1" / "container.json"')) != []
    assert spelled(ast.parse('p = f"{run_id}/attempts/{n}"')) != []
    assert spelled(ast.parse('p = f"{where}/alerts/{name}"')) != []
    assert spelled(ast.parse('p = root.glob("*/attempts/1/gateway/journal.jsonl")')) != []


def test_relative_names_are_the_paths_names():
    rel, paths = layout.RelativeRun("r1"), layout.RunPaths(Path("r1"))
    assert rel.attempt(3) == paths.attempt(3).root.as_posix()
    assert rel.alert("a.json") == paths.alert("a").as_posix()
    assert (rel.attempts, rel.alerts, rel.control) == tuple(
        p.as_posix() for p in (paths.attempts, paths.alerts, paths.control)
    )
    assert Path(f"r1/{layout.ATTEMPTS}/2/{layout.JOURNAL}").match(layout.journals_glob())
    assert Path(paths.events.as_posix()).match(layout.EVENTS_GLOB)
