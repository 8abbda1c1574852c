"""The verifier inside real runs, at a size where the driver's snapshots hash in helper
processes."""

import os
import shutil

from .conftest import ROOT, findings


def test_a_big_workspace_is_hashed_by_the_helpers_and_one_covert_edit_is_found(
    run, make_spec, tmp_path, monkeypatch
):
    """Over Hashing.helper_after_bytes the driver's snapshots hash in helper processes; the verdict
    is the same as ever: the one direct edit outside the writable globs, and nothing else."""
    from assure.verify import hasher, snapshot

    fixture = tmp_path / "big"
    shutil.copytree(ROOT / "fixtures" / "workspaces" / "calc", fixture)
    (fixture / "data").mkdir()
    for n in range(24):
        (fixture / "data" / f"f{n:02}.bin").write_bytes(os.urandom(1 << 20))
    assert sum(p.stat().st_size for p in fixture.rglob("*")) > snapshot.HASHING.helper_after_bytes
    if hasher._shared is not None:
        hasher._shared.close()
        hasher._shared = None
    monkeypatch.setattr(
        snapshot, "HASHING", snapshot.Hashing(helpers=2)
    )  # whatever this machine's CPUs
    edit = (
        "printf x | dd of=data/f07.bin bs=1 seek=4096 conv=notrunc 2>/dev/null; echo ok >"
        " out/notes.txt"
    )
    spec = make_spec(
        "big",
        "unused.sh",
        agent={"command": ["sh", "-c", edit]},
        workspace={"fixture": str(fixture), "writable": ["out/**"]},
    )

    result = run(spec)

    assert findings(result).get("unattributed") == ["data/f07.bin"]
    assert findings(result)["attributed"] == ["out/notes.txt"]
    assert hasher._shared is not None and [p.poll() for p, _ in hasher._shared.helpers] == [
        None,
        None,
    ]
