"""Limits that the host, the gateway and the agent's client must agree on, each stated once.

Constants only (no imports): the gateway and the agent images both carry this file."""

# One model exchange, start to end: the gateway's call upstream, the egress tunnel it runs
# through (the host passes it to the proxy), and the agent's wait for the gateway's answer.
MODEL_EXCHANGE_SECONDS = 600.0
