"""Protected paths are put back before the acceptance tests run."""

from assure.checks import restore_protected


def test_protected_files_are_restored_added_ones_removed_others_kept(tmp_path):
    fixture, copy = tmp_path / "fixture", tmp_path / "copy"
    for root in (fixture, copy):
        (root / "tests").mkdir(parents=True)
        (root / "src").mkdir()
    (fixture / "tests" / "test_a.py").write_text("real test")
    (fixture / "tests" / "test_gone.py").write_text("deleted by the agent")
    (copy / "tests" / "test_a.py").write_text("def test(): pass  # edited by the agent")
    (copy / "tests" / "conftest.py").write_text("import os  # planted by the agent")
    (copy / "tests" / "link.py").symlink_to("/etc/passwd")
    (copy / "src" / "calc.py").write_text("the agent's work")
    restore_protected(copy, fixture, ("tests/**",))
    assert sorted(p.name for p in (copy / "tests").iterdir()) == ["test_a.py", "test_gone.py"]
    assert (copy / "tests" / "test_a.py").read_text() == "real test"
    assert (copy / "tests" / "test_gone.py").read_text() == "deleted by the agent"
    assert (copy / "src" / "calc.py").read_text() == "the agent's work"
