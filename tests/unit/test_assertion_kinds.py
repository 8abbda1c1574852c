"""The registry of assertion kinds: one class each, and nothing outside it decides by name."""

from __future__ import annotations

from assure import spec
from assure.run import checks
from assure.verify.assertions import CHECK_KINDS, KINDS, Where


def test_every_kind_in_the_schema_has_a_class_and_every_class_a_schema_fragment() -> None:
    assert set(KINDS) == set(spec.schema()["$defs"]["assertion"]["properties"])
    assert all(KINDS[name].schema for name in KINDS)


def test_every_check_container_kind_has_a_runner_and_its_own_results_file(tmp_path) -> None:
    from assure.records.layout import AttemptPaths

    assert (
        set(checks.RUNNERS)
        == set(CHECK_KINDS)
        == {n for n, k in KINDS.items() if k.where is Where.CHECK}
    )
    paths = AttemptPaths(tmp_path)
    files = [KINDS[kind].results(paths) for kind in CHECK_KINDS]
    assert len(set(files)) == len(files) and all(f.parent == tmp_path for f in files)
