"""How a spec's `model` block becomes gateway config, mounts and egress.

`model.allow` (features the provider would act on by itself, named one by one) and
`model.server_tool_fees` pass to the gateway as they are; the gateway enforces them.

The key is read on the host (from the environment or a file) and written to a private file
that only the gateway container mounts; it is removed with the attempt. Replay mounts an
earlier attempt's journal and blobs read-only; scripted mode copies its script into the
gateway's config folder. A real upstream's `host:port` joins the egress allowlist.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.parse
from dataclasses import replace
from pathlib import Path

from assure.core.limits import MODEL_EXCHANGE_SECONDS
from assure.errors import AssureError
from assure.gateway import config as gwconfig
from assure.sandbox import hardening
from assure.sandbox.backend import Mount
from assure.spec import Egress, Model, Spec, no_egress

UPSTREAM_MODES = (
    "anthropic",
    "openai",
)  # a real API behind the egress proxy, its key mounted into the gateway only

PROXY_TIMEOUT_SECONDS = (
    MODEL_EXCHANGE_SECONDS  # a long model answer must not be cut in the proxy's tunnel
)
CACHE_WRITE_FACTOR, CACHE_READ_FACTOR = (
    1.25,
    0.1,
)  # Anthropic's cache prices relative to input, when a spec omits them


def prices(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        model: {
            "cache_write": p["input"] * CACHE_WRITE_FACTOR,
            "cache_read": p["input"] * CACHE_READ_FACTOR,
            **p,
        }
        for model, p in table.items()
    }


def upstream_hostport(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def egress(spec: Spec) -> Egress | None:
    """The egress the run needs: the spec's own, plus the model API for an upstream mode."""
    if spec.model is None or spec.model.mode not in UPSTREAM_MODES:
        return spec.egress
    base = spec.egress or no_egress()
    return replace(base, allow=tuple(sorted({*base.allow, upstream_hostport(spec.model.upstream)})))


class ModelAccess:
    """The per-attempt pieces for one spec's model block (nothing when there is none)."""

    def __init__(self, model: Model | None, spec_dir: Path, config_dir: Path, uid: int, gid: int):
        self.model = model
        self.spec_dir, self.config_dir, self.uid, self.gid = spec_dir, config_dir, uid, gid
        self.secrets: Path | None = None

    def gateway_config(self) -> gwconfig.Model | None:
        """The gateway config's `model`: what the provider may do beyond the defaults, and where
        its answers come from, as the gateway's container sees them."""
        m = self.model
        if not m:
            return None
        common = gwconfig.Model(
            mode=m.mode,
            blob_dir=f"{hardening.GATEWAY_STATE}/blobs",
            prices={name: gwconfig.Price(**p) for name, p in prices(m.prices).items()},
            allow={name: frozenset(items) for name, items in m.allow.items()},
            server_tool_fees={**gwconfig.SERVER_TOOL_FEES, **m.server_tool_fees},
        )
        if m.mode in UPSTREAM_MODES:
            return replace(
                common,
                upstream=m.upstream.rstrip("/"),
                key_file=f"{hardening.GATEWAY_SECRETS}/model-key",
                allow_http=m.allow_http,
            )
        if m.mode == "replay":
            volatile: tuple[tuple[str, ...], tuple[str, ...]] = (
                gwconfig.DEFAULT_VOLATILE_FIELDS,
                gwconfig.DEFAULT_VOLATILE_TEXT,
            )
            if m.volatile is not None:
                volatile = (
                    tuple(m.volatile.get("fields", volatile[0])),
                    tuple(m.volatile.get("text", volatile[1])),
                )
            return replace(
                common,
                recording=(f"{hardening.GATEWAY_RECORDING}/journal.jsonl",),
                recording_blob_dir=f"{hardening.GATEWAY_RECORDING}/blobs",
                volatile=volatile,
            )
        shutil.copyfile(self._path("script"), self.config_dir / "model-script.json")
        os.chmod(self.config_dir / "model-script.json", 0o644)
        return replace(common, script=f"{hardening.GATEWAY_CONFIG}/model-script.json")

    def mounts(self) -> tuple[Mount, ...]:
        """Gateway-only mounts: the key (anthropic) or the recording (replay)."""
        if not self.model:
            return ()
        if self.model.mode in UPSTREAM_MODES:
            self.secrets = self._write_key(self.model)
            return (Mount(str(self.secrets), hardening.GATEWAY_SECRETS, read_only=True),)
        if self.model.mode == "replay":
            return (
                Mount(
                    str(self._path("recording") / "gateway"),
                    hardening.GATEWAY_RECORDING,
                    read_only=True,
                ),
            )
        return ()

    def cleanup(self) -> None:
        if self.secrets is not None:
            shutil.rmtree(self.secrets, ignore_errors=True)
            self.secrets = None

    def _path(self, field: str) -> Path:
        path = (self.spec_dir / (getattr(self.model, field) or "")).resolve()
        if not path.exists():
            raise AssureError(
                f"model.{field}: {path} does not exist",
                fix="point it at an existing file or attempt directory",
            )
        return path

    def _write_key(self, m: Model) -> Path:
        key = (
            self._path("key_file").read_text().strip()
            if m.key_file
            else os.environ.get(m.key_env, "")
        )
        if not key:
            raise AssureError(
                f"model.mode is {m.mode} but no key: set {m.key_env} (or model.key_file)",
                fix=f"export {m.key_env}=... before `assure run`",
            )
        folder = Path(
            tempfile.mkdtemp(
                prefix="assure-secret-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
            )
        )
        path = folder / "model-key"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        if os.geteuid() == 0:
            os.chown(folder, self.uid, self.gid)
            os.chown(path, self.uid, self.gid)
        os.chmod(folder, 0o500)
        return folder
