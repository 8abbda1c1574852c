"""The gateway: the agent's only channel out of its sealed container.

It runs in its own container as a non-root user, serves HTTP/1.1 + JSON on a unix socket,
passes every tool call through `assure.core.gate.decide()` and journals every request,
decision and effect with `assure.core.chain.ChainWriter`. Standard library, `assure.core` and
apsw only: this package is copied into a minimal image (`images.IMAGE_SOURCES`).
"""
