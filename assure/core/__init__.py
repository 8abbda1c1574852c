"""The core: what the gateway image carries besides `assure.gateway` (see
`assure.sandbox.images.IMAGE_SOURCES`): the gate, the hash chain, operator control, globs,
confined file operations and atomic writes. Standard library only, so the host and the
gateway run the same code."""
