"""What the gateway's boot imports (issue 25): its CPU is paid per attempt, pooled or not, so the
modules it has no use for before its first call stay out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOT_AT_BOOT = ("typing", "pathlib", "secrets", "argparse")


def test_the_gateway_boots_without_typing_pathlib_or_secrets() -> None:
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
