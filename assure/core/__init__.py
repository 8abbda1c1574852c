"""The core: what the gateway image carries besides `assure.gateway` (see
`assure.sandbox.docker.images.IMAGE_SOURCES`): the gate, the hash chain, operator control, globs,
confined file operations, atomic writes, SQLite hardening with changeset replay, and the
limits the host, the gateway and the agent must agree on (`limits`, which the agent image
carries too). Standard library only (changeset.py: apsw, which the gateway image pins), so
the host and the gateway run the same code.

What the gateway imports at boot imports no `typing` (a tenth of its boot's CPU, issue 25):
its modules take `Any` and the like under `TYPE_CHECKING = False` (what mypy reads as
typing.TYPE_CHECKING); tests/unit/test_gateway_boot.py holds it."""
