"""The core: what the gateway image carries besides `assure.gateway` (see
`assure.sandbox.images.IMAGE_SOURCES`): the gate, the hash chain, operator control, globs,
confined file operations and atomic writes, and SQLite hardening with changeset replay.
Standard library only (changeset.py: apsw, which the gateway image pins), so the host and
the gateway run the same code."""
