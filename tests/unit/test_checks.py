"""Protected paths are put back before the acceptance tests run."""

from assure.core import confined
from assure.run.checks import restore_protected


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
    present = [rel for rel, _ in confined.walk(copy)]
    restore_protected(copy, fixture, ("tests/**",), present)
    assert sorted(p.name for p in (copy / "tests").iterdir()) == ["test_a.py", "test_gone.py"]
    assert (copy / "tests" / "test_a.py").read_text() == "real test"
    assert (copy / "tests" / "test_gone.py").read_text() == "deleted by the agent"
    assert (copy / "src" / "calc.py").read_text() == "the agent's work"


def test_the_check_view_never_follows_the_agent_and_refuses_an_incomplete_post(tmp_path):
    import os

    from assure.run.checks import check_view

    fixture, view, host = tmp_path / "fixture", tmp_path / "view", tmp_path / "host"
    (fixture / "tests").mkdir(parents=True)
    (fixture / "tests" / "test_a.py").write_text("real test")
    host.mkdir()
    (host / "canary").write_text("host data")
    view.mkdir()
    (view / "tests").symlink_to(host)  # the protected folder swapped for a link to the host
    post = {"truncated": False, "entries": [{"path": "tests"}]}
    ids = (os.getuid(), os.getgid())
    report = check_view(view, post, fixture, ("tests/**",), ids)
    assert sorted(os.listdir(host)) == ["canary"] and (host / "canary").read_text() == "host data"
    assert (view / "tests").is_dir() and not (view / "tests").is_symlink()
    assert (view / "tests" / "test_a.py").read_text() == "real test"
    assert not report.left_out
    # POST cut short may not list a planted conftest.py: no check runs on that view
    cut = check_view(view, {**post, "truncated": True}, fixture, ("tests/**",), ids)
    assert cut.left_out


def test_a_fixture_that_cannot_be_copied_whole_fails_before_the_attempt_starts(tmp_path):
    import os

    import pytest

    from assure.errors import SandboxError
    from assure.run.attempt import fresh_copy

    fixture = tmp_path / "fixture"
    fixture.mkdir()
    with open(fixture / "sparse", "wb") as fh:
        fh.truncate(2**40)
    fresh_copy(fixture, tmp_path / "ok")
    assert (tmp_path / "ok" / "sparse").stat().st_blocks == 0
    os.mkfifo(fixture / "fifo")
    with pytest.raises(SandboxError, match="fifo"):
        fresh_copy(fixture, tmp_path / "bad")


def test_views_are_made_one_ahead_and_none_past_the_phase_s_last_check(tmp_path, monkeypatch):
    from assure.run import checks

    made, released = [], []

    class View:
        def __init__(self, name):
            self.workspace, self.name = tmp_path / name, name

        def release(self):
            released.append(self.name)

    def make_copy(spec, workspace, post_json, where, user, name):
        made.append(name)
        return View(f"{name}-{len(made)}"), confined.CopyReport()

    monkeypatch.setattr(checks, "_make_copy", make_copy)
    for views, expect in (
        (3, 3),
        (None, 4),
    ):  # unknown: one made ahead for a check that never comes
        made.clear(), released.clear()
        copies, seen = checks._CopiesAhead(tmp_path, (10001, 10001), views), []
        for _ in range(3):
            with copies.take("spec", tmp_path, {}) as (where, _):
                seen.append(where.name)
        copies.close()
        every = [f"{n}-{i}" for i, n in enumerate(made, 1)]
        assert len(made) == expect and seen == every[:3] and sorted(released) == sorted(every)
