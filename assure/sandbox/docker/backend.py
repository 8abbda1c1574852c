"""The Docker engine as a `SandboxBackend` and an `ImageBuilder` (sandbox/backend.py), through
docker-py's public API only, Docker errors mapped once.

Every error leaves here as a `SandboxError` (or `ImageError`) with the Docker exception kept
as its cause. Engine facts for `assure doctor` (`info`, `version`, `runtimes`) are
Docker's alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import docker
import docker.errors
import requests.exceptions

from assure.errors import ImageError, SandboxError
from assure.sandbox.backend import (
    ENGINE_FIX,
    LABEL_OWNER,
    LABEL_RUN,
    OWNER,
    ChangeKind,
    ContainerRequest,
    FsChange,
    Observed,
    Owned,
)
from assure.sandbox.docker.gate import command
from assure.sandbox.docker.observe import observed

DIFF_KINDS: dict[object, ChangeKind] = {
    0: ChangeKind.MODIFIED,
    1: ChangeKind.ADDED,
    2: ChangeKind.DELETED,
}
UNIX_BASE = "http+docker://"  # docker-py's base URL for an engine on a unix socket
GO_MODE_DIR = 1 << 31  # os.ModeDir in the engine's path-stat header


@contextlib.contextmanager
def _mapped(what: str) -> Iterator[None]:
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageError(
            f"{what}: image not found", fix="run `assure images build` (or `make images`)"
        ) from exc
    except docker.errors.BuildError as exc:
        tail = "".join(str(x.get("stream", x.get("error", ""))) for x in list(exc.build_log)[-15:])
        raise ImageError(f"{what}: build failed: {exc.msg}\n{tail}") from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise SandboxError(f"{what}: {exc}", fix=ENGINE_FIX) from exc


def _send_all(sock: socket.socket, data: bytes) -> None:
    """An exec's stdin, then its end (the engine closes the process's stdin on half-close)."""
    with contextlib.suppress(OSError):
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def _raw_socket(raw: object) -> socket.socket:
    """The socket under docker-py's attached stream (a `SocketIO` over it on a unix or TCP
    engine, the socket itself over SSH); anything else is refused, not read half-way."""
    sock = getattr(raw, "_sock", raw)
    if not isinstance(sock, socket.socket):
        raise SandboxError(
            f"the engine's attached stream is a {type(sock).__name__}, not a socket",
            fix=ENGINE_FIX,
        )
    return sock


def _read_frames(sock: socket.socket, limit: int) -> tuple[bytes, bytes]:
    """stdout and stderr of an attached stream (8-byte frame header: stream, 0, 0, 0, size),
    each kept to `limit` bytes; read to the end."""
    kept = {1: bytearray(), 2: bytearray()}
    buf = bytearray()
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return bytes(kept[1]), bytes(kept[2])
        buf += chunk
        while len(buf) >= 8:
            size = int.from_bytes(buf[4:8], "big")
            if len(buf) < 8 + size:
                break
            stream = kept.get(buf[0])
            if stream is not None and len(stream) < limit:
                stream += buf[8 : 8 + min(size, limit - len(stream))]
            del buf[: 8 + size]


def _frames_payload(data: bytes) -> bytes:
    """The bytes of a non-TTY container's log frames (8-byte header: stream, 0, 0, 0, size),
    stdout and stderr in the order written; a cut last frame keeps what arrived."""
    out = bytearray()
    at = 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at + 4 : at + 8], "big")
        out += data[at + 8 : at + 8 + size]
        at += 8 + size
    return bytes(out)


def create_kwargs(request: ContainerRequest) -> dict[str, Any]:
    """A request as docker-py's `containers.create` keyword arguments (what is None is left
    to the engine or the image)."""
    optional = {
        "name": request.name,
        "command": command(request),
        "environment": dict(request.env) or None,
        "working_dir": request.working_dir,
        "hostname": request.hostname,
        "user": request.user,
        "network_mode": request.network,
        "tmpfs": dict(request.tmpfs) or None,
        "ulimits": (
            [{"name": u.name, "soft": u.soft, "hard": u.hard} for u in request.ulimits] or None
        ),
        "cap_add": list(request.cap_add) or None,
        "cap_drop": list(request.cap_drop) or None,
        "security_opt": list(request.security_opt) or None,
        "ipc_mode": request.ipc,
        "pids_limit": request.pids_limit,
        "mem_limit": request.memory,
        "memswap_limit": request.memory_swap,
        "nano_cpus": request.nano_cpus,
        "runtime": request.runtime,
        "log_config": (
            {
                "type": "json-file",
                "config": {"max-size": request.log_max, "max-file": "1"},
            }
            if request.log_max
            else None
        ),
        "volumes": (
            {
                m.source: {
                    "bind": m.target,
                    "mode": ("ro" if m.read_only else "rw")
                    + (",nocopy" if m.nocopy else "")
                    + (f",{m.propagation}" if m.propagation else ""),
                }
                for m in request.mounts
            }
            or None
        ),
        "stdin_open": request.stdin_open or None,
    }
    return {
        "image": request.image,
        "labels": request.all_labels,
        "read_only": request.read_only_root,
        "privileged": False,
        "init": request.init,
        **{k: v for k, v in optional.items() if v is not None},
    }


# `containers.create` arguments the low-level create takes itself; the rest are the host config's.
CREATE_KEYS = frozenset(
    {"image", "name", "command", "environment", "working_dir", "hostname", "user", "labels"}
    | {"stdin_open"}
)


def split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`create_kwargs` as `APIClient.create_container`'s arguments and `create_host_config`'s,
    split as docker-py's model splits them: a bind's target is also a volume of the create."""
    create = {k: v for k, v in kwargs.items() if k in CREATE_KEYS}
    host = {k: v for k, v in kwargs.items() if k not in CREATE_KEYS and k != "volumes"}
    if kwargs.get("volumes"):
        host["binds"] = kwargs["volumes"]
        create["volumes"] = [v["bind"] for v in kwargs["volumes"].values()]
    return create, host


class DockerBackend:
    """The Docker engine: a `SandboxBackend` for attempts and cleanup, an `ImageBuilder` for
    images, and the engine facts doctor reports."""

    def __init__(self) -> None:
        with _mapped("cannot reach the Docker engine"):
            # asks the engine its API version (GET /version): that is the reachability check, so
            # no ping after it (one round trip less before a run, issue 25)
            self._client = docker.from_env(timeout=120)
            if str(self._client.api.base_url).startswith(UNIX_BASE):
                # no proxy, CA bundle or netrc applies to a unix socket: without this, requests
                # scans the whole environment for them twice on every round trip
                self._client.api.trust_env = False
        self._security: list[str] | None = None
        self._layers: dict[
            str, str | None
        ] = {}  # container id -> its UpperDir, from its last inspect

    # --- engine -----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        with _mapped("docker info"):
            return self._client.info()

    def security_options(self) -> list[str]:
        """How the engine confines containers (`name=seccomp,...`, `name=apparmor`): fixed for
        the daemon's life, so asked once per backend, not once per attempt."""
        if self._security is None:
            self._security = list(self.info().get("SecurityOptions") or [])
        return self._security

    def runtimes(self) -> dict[str, Any]:
        """The engine's registered runtimes, each with its `path` and `runtimeArgs`."""
        return dict(self.info().get("Runtimes") or {})

    def version(self) -> dict[str, Any]:
        with _mapped("docker version"):
            return self._client.version()

    # --- images -----------------------------------------------------------------------
    def image_exists(self, tag: str) -> bool:
        try:
            self._client.images.get(tag)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.DockerException as exc:
            raise SandboxError(f"inspect image {tag}: {exc}", fix=ENGINE_FIX) from exc

    def try_pull(self, reference: str) -> bool:
        """True if the image is present or could be pulled; False when no registry answers."""
        if self.image_exists(reference):
            return True
        try:
            self._client.images.pull(reference)
            return True
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return False

    def import_rootfs(self, tar_path: str, repository: str, tag: str, changes: list[str]) -> None:
        with _mapped(f"docker import {repository}:{tag}"):
            self._client.api.import_image_from_file(
                tar_path, repository=repository, tag=tag, changes=changes
            )

    def build(
        self,
        context: bytes,
        tag: str,
        buildargs: dict[str, str],
        labels: dict[str, str],
        *,
        network: bool = False,
    ) -> None:
        """Build from a tar context; with no network unless the recipe needs a package mirror."""
        with _mapped(f"docker build {tag}"):
            self._client.images.build(
                fileobj=io.BytesIO(context),
                custom_context=True,
                tag=tag,
                buildargs=buildargs,
                labels=labels,
                rm=True,
                forcerm=True,
                network_mode="default" if network else "none",
                pull=False,
            )

    def tag(self, source: str, repository: str, tag: str) -> None:
        with _mapped(f"docker tag {source}"):
            self._client.images.get(source).tag(repository, tag)

    # --- volumes ----------------------------------------------------------------------
    def create_volume(self, name: str, labels: dict[str, str], driver_opts: dict[str, str]) -> str:
        with _mapped(f"create volume {name}"):
            return self._client.volumes.create(
                name=name, driver="local", driver_opts=driver_opts, labels=labels
            ).name

    def remove_volume(self, name: str) -> None:
        try:
            self._client.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"remove volume {name}: {exc}", fix=ENGINE_FIX) from exc

    # --- containers -------------------------------------------------------------------
    def create_container(self, request: ContainerRequest) -> str:
        """The low-level create (`APIClient.create_container`), without the inspect docker-py's
        model adds after every create: one round trip, not two."""
        api = self._client.api
        with _mapped(f"create container {request.name}"):
            create, host = split_kwargs(create_kwargs(request))
            made = api.create_container(**create, host_config=api.create_host_config(**host))
        cid: str = made["Id"]
        return cid

    def start(self, cid: str) -> None:
        with _mapped("start container"):
            self._client.api.start(cid)

    def start_container(self, request: ContainerRequest) -> str:
        """Create and start; a container that fails to start is removed before raising."""
        cid = self.create_container(request)
        try:
            self.start(cid)
        except BaseException:
            with contextlib.suppress(SandboxError):
                self.remove_container(cid)
            raise
        return cid

    def wait(self, cid: str, timeout: float) -> int | None:
        """Exit code, or None if still running after `timeout` seconds."""
        try:
            result = self._client.api.wait(
                cid,
                timeout=max(timeout, 0.01),  # type: ignore[arg-type]  # stub: int; requests: float
            )
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            return None
        except docker.errors.DockerException as exc:
            raise SandboxError(f"wait for container: {exc}", fix=ENGINE_FIX) from exc
        return int(result.get("StatusCode", -1))

    @contextlib.contextmanager
    def attached(self, cid: str, *, stdin: bool) -> Iterator[socket.socket]:
        """The stdio of a created container as one raw socket; attach before `start` so no
        byte is missed. Write stdin (shut the write side to close it, with `stdin_open`);
        read stdout and stderr as the engine's frames (8-byte header: stream, 0, 0, 0, size)."""
        with _mapped("attach container"):
            raw = self._client.api.attach_socket(
                cid, params={"stdin": int(stdin), "stdout": 1, "stderr": 1, "stream": 1}
            )
        sock = _raw_socket(raw)
        try:
            yield sock
        finally:
            with contextlib.suppress(OSError):
                sock.close()
                raw.close()

    def stop(self, cid: str, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (the engine answers 304, not an error,
        for a container that already exited)."""
        with _mapped("stop container"):
            self._client.api.stop(cid, timeout=int(grace))

    def observe(self, cid: str) -> Observed:
        return observed(self.inspect(cid))

    def inspect(self, cid: str) -> dict[str, Any]:
        """`docker inspect` as the engine gives it (the CIS self-check reads all of it)."""
        with _mapped("inspect container"):
            info: dict[str, Any] = self._client.api.inspect_container(cid)
        self._layers[cid] = ((info.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
        return info

    def processes(self, cid: str) -> list[str]:
        """The running container's processes, as command lines (`docker top`: the host's ps)."""
        with _mapped("docker top"):
            top = self._client.api.top(cid)
        column = (top.get("Titles") or []).index("CMD")
        return [str(row[column]) for row in top.get("Processes") or []]

    def logs(self, cid: str, limit: int) -> bytes:
        """stdout and stderr, asked of the engine's logs endpoint directly: docker-py's `logs`
        inspects the container first to learn whether it has a TTY, one round trip more, and
        no container of ours has one, so the answer is always the engine's frames."""
        api = self._client.api
        url = f"{api.base_url}/v{api.api_version}/containers/{quote(cid, safe='')}/logs"
        with _mapped("container logs"):
            answer = api.get(url, params={"stdout": 1, "stderr": 1})
            answer.raise_for_status()
        return _frames_payload(answer.content)[-limit:]

    def fs_changes(self, cid: str) -> list[FsChange]:
        """`docker diff`, whose kinds are numbers (0 modified, 1 added, 2 deleted)."""
        with _mapped("docker diff"):
            changes = self._client.api.diff(cid) or []
        return [
            FsChange(str(c.get("Path", "")), DIFF_KINDS.get(c.get("Kind"), ChangeKind.MODIFIED))
            for c in changes
        ]  # a kind Docker does not document: still a change, never dropped

    def writable_layer(self, cid: str) -> Path | None:
        """The host folder holding the container's own writes (overlay upper dir), when this
        host can read it (a local engine, as root); None otherwise (use `fs_changes`). A
        container's layer never moves: an earlier `inspect` of it answers."""
        if cid not in self._layers:
            self.inspect(cid)
        upper = self._layers.get(cid)
        if not upper or not os.access(upper, os.R_OK | os.X_OK):
            return None
        return Path(upper)

    def read_file(self, cid: str, path: str, limit: int) -> tuple[str, bytes | None, str | None]:
        """(kind, content, link target) of one path in a stopped container, bounded by `limit`."""
        with _mapped(f"copy {path} out of container"):
            stream, stat = self._client.api.get_archive(cid, path)
            if stat.get("mode", 0) & GO_MODE_DIR:
                stream.close()  # never tar up a whole folder: its entries are listed on their own
                return "dir", None, None
            buf = io.BytesIO()
            for chunk in stream:
                buf.write(chunk)
                if buf.tell() > limit + 64 * 1024:
                    return "file", None, None
        buf.seek(0)
        with tarfile.open(fileobj=buf) as tar:
            member = tar.next()
            if member is None:
                return "other", None, None
            if member.issym() or member.islnk():
                return "symlink", None, member.linkname
            if member.isdir():
                return "dir", None, None
            if not member.isfile():
                return "other", None, None
            if member.size > limit:
                return "file", None, None
            fh = tar.extractfile(member)
            return "file", fh.read() if fh else None, None

    def exec(
        self, cid: str, argv: list[str], data: bytes, *, limit: int, timeout: float | None
    ) -> tuple[int | None, bytes, bytes]:
        """Run `argv` in the running container `cid` as its own user, from `/`: `data` on its
        stdin, then (exit code, stdout, stderr), each stream read to at most `limit` bytes
        (the rest is drained and dropped). SandboxError: the engine refused (the container
        is not running) or did not answer within `timeout` seconds."""
        with _mapped(f"exec in container {cid[:12]}"):
            made = self._client.api.exec_create(
                cid, argv, stdin=True, stdout=True, stderr=True, workdir="/"
            )
            raw = self._client.api.exec_start(made["Id"], socket=True)
        sock = _raw_socket(raw)
        sock.settimeout(timeout)
        writer = threading.Thread(target=_send_all, args=(sock, data), daemon=True)
        try:
            writer.start()
            out, err = _read_frames(sock, limit)
        except OSError as exc:
            raise SandboxError(f"exec in container {cid[:12]}: {exc}", fix=ENGINE_FIX) from exc
        finally:
            with contextlib.suppress(OSError):
                sock.close()
                raw.close()
        with _mapped(f"exec in container {cid[:12]}"):
            code = self._client.api.exec_inspect(made["Id"]).get("ExitCode")
        return code, out, err

    def remove_container(self, cid: str) -> None:
        self._layers.pop(cid, None)
        try:
            self._client.api.remove_container(cid, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # removal already in progress
                return
            raise SandboxError(f"remove container: {exc}", fix=ENGINE_FIX) from exc

    # --- cleanup ----------------------------------------------------------------------
    def owned(self, run_id: str | None = None) -> Owned:
        """Containers, volumes and networks labelled as ours (optionally for one run).

        Uses the engine's list summaries (labels included), so a resource removed while we
        list is simply absent instead of failing an inspect."""
        labels = [f"{LABEL_OWNER}={OWNER}"] + ([f"{LABEL_RUN}={run_id}"] if run_id else [])
        with _mapped("list assure resources"):
            containers = self._client.api.containers(all=True, filters={"label": labels})
            volumes = (self._client.api.volumes(filters={"label": labels}) or {}).get(
                "Volumes"
            ) or []
            networks = self._client.api.networks(filters={"label": labels})
        return {
            "containers": [
                {
                    "id": c["Id"],
                    "name": (c.get("Names") or ["?"])[0].lstrip("/"),
                    **(c.get("Labels") or {}),
                }
                for c in containers
            ],
            "volumes": [
                {"id": v["Name"], "name": v["Name"], **(v.get("Labels") or {})} for v in volumes
            ],
            "networks": [
                {"id": n["Id"], "name": n["Name"], **(n.get("Labels") or {})} for n in networks
            ],
        }

    def create_network(self, name: str, labels: dict[str, str], *, internal: bool) -> str:
        with _mapped(f"create network {name}"):
            made = self._client.networks.create(
                name, driver="bridge", internal=internal, labels=labels, check_duplicate=True
            )
        if made.id is None:  # the stub's Optional: the engine always answers with an id
            raise SandboxError(f"create network {name}: the engine gave no id", fix=ENGINE_FIX)
        return made.id

    def connect(self, network: str, cid: str) -> None:
        with _mapped(f"connect to network {network}"):
            self._client.networks.get(network).connect(cid)

    def remove_network(self, nid: str) -> None:
        try:
            self._client.networks.get(nid).remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"remove network: {exc}", fix=ENGINE_FIX) from exc
