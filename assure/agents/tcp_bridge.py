"""A loopback TCP bridge to the gateway's unix socket, for agents that speak only TCP.

    python3 -m assure.agents.tcp_bridge [--port 8765] [--socket PATH] [-- COMMAND ARGS...]

Some agents (CLI tools built on an SDK that takes `ANTHROPIC_BASE_URL`, or any HTTP client
that cannot use a unix socket) need a TCP address. The bridge listens on 127.0.0.1:PORT
inside the agent container and copies the bytes of each accepted connection, both ways and
unchanged, to a fresh connection to the gateway socket ($ASSURE_GATEWAY_SOCKET, default
/run/assure/gateway.sock). With a COMMAND it runs it with `ANTHROPIC_BASE_URL` and
`ASSURE_GATEWAY_URL` set to http://127.0.0.1:PORT, `OPENAI_BASE_URL` to http://127.0.0.1:PORT/v1
(the OpenAI SDKs put the `/v1` in the base URL) and, unless set, `OPENAI_API_KEY` to a
placeholder (the SDK refuses to start without one; the gateway sends its own key, if any, and
never the agent's), and exits with its exit code:

    python3 -m assure.agents.tcp_bridge -- claude -p "fix the failing test"

Why this is safe:
- It listens on 127.0.0.1 only (there is no option to choose another address). The agent
  container runs with `--network none`, so its network namespace has only `lo`: nothing
  outside the container can reach the port, and the bridge cannot reach anything but the
  socket it was given.
- It adds no capability. Any process that can connect to 127.0.0.1 in the container can
  already open the gateway socket itself (same container, same user, mode 0666); the bridge
  only changes the framing from TCP to a unix socket.
- It is blind: bytes go through unchanged, so the gateway still reads, gates, journals and
  limits every request exactly as if it came over the socket. The bridge holds no
  credentials, parses nothing and keeps nothing.
- It is bounded: at most MAX_CONNECTIONS at once (more are closed at once), and a connection
  ends when either side closes it (half-closes are passed on).

Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading

from assure.client import DEFAULT_SOCKET, SOCKET_ENV

HOST = "127.0.0.1"  # loopback only, by design: see the module docstring
DEFAULT_PORT = 8765
MAX_CONNECTIONS = 32
PLACEHOLDER_KEY = "assure-gateway-holds-the-key"
CHUNK = 65536


class Bridge:
    """Accept on 127.0.0.1:`port` (0: any free port) and pipe each connection to `socket_path`."""

    def __init__(self, socket_path: str, port: int = DEFAULT_PORT):
        self.socket_path = socket_path
        self._listener = socket.create_server((HOST, port), reuse_port=False)
        self.port = int(self._listener.getsockname()[1])
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> Bridge:
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-bridge", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        if self._thread is not None:
            self._thread.join(2)

    def __enter__(self) -> Bridge:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._stop.is_set():
                    return
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.socket_path)
            _pipe(conn, upstream)
        except OSError:
            pass
        finally:
            upstream.close()
            conn.close()
            self._slots.release()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both directions have ended; an EOF on one side half-closes the other."""
    peers = {a: b, b: a}
    with selectors.DefaultSelector() as selector:
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ)
        open_readers = 2
        while open_readers:
            for key, _ in selector.select():
                src = key.fileobj
                assert isinstance(src, socket.socket)
                dst = peers[src]
                try:
                    data = src.recv(CHUNK)
                except ConnectionError:
                    return
                if data:
                    dst.sendall(data)
                    continue
                selector.unregister(src)
                open_readers -= 1
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m assure.agents.tcp_bridge",
        description="Bridge 127.0.0.1:PORT to the gateway's unix socket.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port on 127.0.0.1 (default {DEFAULT_PORT}; 0 = any free port)",
    )
    parser.add_argument(
        "--socket", default=os.environ.get(SOCKET_ENV, DEFAULT_SOCKET), help="the gateway socket"
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help=(
            "-- COMMAND ARGS...: run it with ANTHROPIC_BASE_URL and OPENAI_BASE_URL set, then stop"
        ),
    )
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        bridge = Bridge(args.socket, args.port).start()
    except OSError as exc:
        print(f"tcp_bridge: cannot listen on {HOST}:{args.port}: {exc}", file=sys.stderr)
        return 1
    print(f"tcp_bridge: {bridge.url} -> {args.socket}", file=sys.stderr, flush=True)
    try:
        if command:
            env = {
                "OPENAI_API_KEY": PLACEHOLDER_KEY,
                **os.environ,
                "ANTHROPIC_BASE_URL": bridge.url,
                "ASSURE_GATEWAY_URL": bridge.url,
                "OPENAI_BASE_URL": f"{bridge.url}/v1",
            }
            try:
                return subprocess.call(command, env=env)
            except OSError as exc:
                print(f"tcp_bridge: cannot run {command[0]!r}: {exc}", file=sys.stderr)
                return 127
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        stop.wait()
        return 0
    finally:
        bridge.close()


if __name__ == "__main__":
    sys.exit(main())
