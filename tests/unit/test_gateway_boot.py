"""What the gateway's boot imports (issue 25): its CPU is paid per attempt, pooled or not, so the
modules it has no use for before its first call stay out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# dataclasses: it imports inspect (ast, dis, tokenize), and made each class by compiling six
# methods; the boot's classes are assure.core.record's
NOT_AT_BOOT = ("typing", "pathlib", "secrets", "argparse", "dataclasses", "inspect")


def test_the_gateway_boots_without_typing_pathlib_secrets_or_dataclasses() -> None:
    code = (
        "import sys; import assure.gateway.__main__, assure.gateway.server;"
        f" print(*sorted(m for m in {NOT_AT_BOOT!r} if m in sys.modules))"
    )
    # -S: no site, whose .pth files import typing on the host (the image's import none of these)
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.stdout.split() == []


def test_the_gateway_command_boots_in_isolation_past_stand_ins_for_standard_modules(
    tmp_path: Path,
) -> None:
    """hardening.GATEWAY_COMMAND (-I -S -B, its package appended after the standard library):
    a `json.py` in the working folder or on PYTHONPATH is never imported; the boot gets as far
    as the missing config (exit 2), as `python3 -m assure.gateway` did."""
    from assure.sandbox.hardening import GATEWAY_BOOT, GATEWAY_COMMAND

    root = str(Path(__file__).resolve().parents[2])
    marker = tmp_path / "imported"
    (tmp_path / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (tmp_path / "assure").mkdir()  # an `assure` package the gateway must not take either
    (tmp_path / "assure" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    assert GATEWAY_COMMAND[:6] == ("python3", "-I", "-S", "-B", "-c", GATEWAY_BOOT)
    boot = GATEWAY_BOOT.replace("'/opt/assure'", repr(root))
    done = subprocess.run(
        [sys.executable, *GATEWAY_COMMAND[1:5], boot, "--config", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PYTHONSTARTUP": str(tmp_path / "json.py")},
    )
    assert done.returncode == 2, done.stderr
    assert "assure.gateway:" in done.stderr
    assert not marker.exists()
