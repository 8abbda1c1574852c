"""Which specs a warm pool serves (run/pool.py `ineligible`): a claimed pair must give its agent
exactly what a cold start gives it, so a spec where it could not starts cold."""

from pathlib import Path

import pytest

from assure import spec
from assure.run import pool

BASE = """\
version: 1
name: demo
agent:
  command: [sh, -c, "true"]
{env}workspace:
  fixture: ws
assertions: []
expect: pass
"""


def load(tmp_path: Path, env: dict[str, str] | None = None) -> spec.Spec:
    (tmp_path / "ws").mkdir(exist_ok=True)
    lines = "".join(f"    {k}: {v!r}\n" for k, v in (env or {}).items())
    path = tmp_path / "s.yaml"
    path.write_text(BASE.format(env=f"  env:\n{lines}" if env else ""))
    return spec.load(path)


def test_a_plain_spec_is_pooled(tmp_path):
    assert (
        pool.ineligible(load(tmp_path, {"TRACE": "on", "n": "1", "argv": "x", "HOME": "/w"}))
        is None
    )


@pytest.mark.parametrize(
    "name",
    ["UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_ENV", "PWD", "IFS", "SECONDS", "RANDOM"],
)
def test_a_variable_bash_keeps_starts_cold(tmp_path, name):
    assert (
        pool.ineligible(load(tmp_path, {name: "1"}))
        == f"the agent's environment sets {name}, which bash keeps itself"
    )
