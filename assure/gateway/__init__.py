"""The gateway: the agent's only channel out of its sealed container.

It runs in its own container as a non-root user, serves HTTP/1.1 + JSON on a unix socket,
passes every tool call through `assure.gate.decide()` and journals every request, decision
and effect with `assure.chain.ChainWriter`. Standard library only (plus assure.chain,
assure.gate, assure.globs): this package is copied into a minimal image.
"""
