"""Agents that run inside the sealed agent container and reach the world only through the
gateway's unix socket: the reference Claude agent and a loopback TCP bridge for CLI agents."""
