"""The base, agent and gateway images: built without any registry, tagged by content.

The base image is a minimal Debian with python3 and sqlite3, bootstrapped with debootstrap
from Debian's package mirror and loaded with `docker import`, or, where a registry answers,
built from `debian:bookworm-slim`. `ASSURE_BASE=auto|bootstrap|registry` forces either way.
Each tag is a digest of everything that goes into the image, so an unchanged image is never
rebuilt and a changed source never runs on a stale image. Python packages an image needs
(apsw for the gateway) are downloaded by the host with pinned hashes (`pip download`) and
installed in the build with `pip install --no-index`: no image ever reaches a registry.
`ASSURE_IMAGE_NAMESPACE` names the repositories (`<namespace>-agent:<digest>`, default `assure`)
and never the digests, so a test can build and remove images that no one else uses.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from assure.core.chain import canonical
from assure.errors import ImageError
from assure.sandbox.backend import ImageBuilder
from assure.sandbox.uids import IDS

ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = ROOT / "images"
PACKAGE_DIR = ROOT / "assure"
REGISTRY_BASE = "debian:bookworm-slim"
BOOTSTRAP_RECIPE: BootstrapRecipe = {
    "recipe": 1,
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3", "python3-pip", "sqlite3", "ca-certificates"],
    "trim": [
        "var/cache/apt",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
    ],
}


class BootstrapRecipe(TypedDict):
    """How debootstrap makes the base image (its tag digests all of it, and the mirror)."""

    recipe: int  # bumped when the recipe's meaning changes
    suite: str
    variant: str
    include: list[str]  # packages beyond the variant's
    trim: list[str]  # folders emptied after, relative to the root


IMPORT_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/sh"]',
]
# Each image: its folder (Dockerfile and extra files) and which files of the package it
# carries: the agent gets the client, the gateway `core/` and `gateway/`, the proxy nothing.
# The import test derives what each image's modules may import from this table.
IMAGE_DIRS = {
    "agent": IMAGES_DIR / "agent",
    "gateway": IMAGES_DIR / "gateway",
    "egress": ROOT / "egress-proxy",
}
IMAGE_SOURCES = {
    "agent": ["__init__.py", "client.py", "agents/*.py", "core/__init__.py", "core/limits.py"],
    "gateway": ["__init__.py", "core/*.py", "gateway/*.py"],
    "egress": [],
}
ROLES = tuple(IMAGE_DIRS)
CACHE = Path(os.environ.get("ASSURE_CACHE", Path.home() / ".cache" / "assure"))
WHEEL_CACHE = CACHE / "wheels"
BUILD_LOCK = "images.lock"  # in CACHE: one process builds this host's images at a time
Progress = Callable[[str], None]


@contextlib.contextmanager
def _host_lock(path: Path, progress: Progress, what: str) -> Iterator[None]:
    """Hold `path`'s lock (flock, released when the process dies), saying so if another
    process holds it: two commands started at once build an image (or fetch wheels) once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another assure process {what}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ImageSet:
    base: str
    agent: str
    gateway: str
    egress: str


def mirror() -> str:
    return os.environ.get("ASSURE_DEBIAN_MIRROR", "http://deb.debian.org/debian")


DEFAULT_NAMESPACE = "assure"


def namespace() -> str:
    ns = os.environ.get("ASSURE_IMAGE_NAMESPACE", DEFAULT_NAMESPACE)
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", ns):
        raise ImageError(
            f"ASSURE_IMAGE_NAMESPACE={ns!r} is not a repository name (lowercase letters, digits,"
            " '.', '_', '-')",
            where="environment",
            fix="unset ASSURE_IMAGE_NAMESPACE or set it to a name such as assure",
        )
    return ns


def base_mode() -> str:
    mode = os.environ.get("ASSURE_BASE", "auto")
    if mode not in ("auto", "bootstrap", "registry"):
        raise ImageError(
            f"ASSURE_BASE={mode!r} is not one of auto, bootstrap, registry",
            where="environment",
            fix="unset ASSURE_BASE or set it to auto",
        )
    return mode


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def base_tags() -> dict[str, str]:
    """The tag each way of making the base would produce."""
    registry = (IMAGES_DIR / "base" / "Dockerfile.registry").read_bytes()
    return {
        "bootstrap": (
            f"{namespace()}-base:{_digest(canonical({**BOOTSTRAP_RECIPE, 'mirror': mirror()}))}"
        ),
        "registry": f"{namespace()}-base:{_digest(registry)}",
    }


def wheels(requirements: Path) -> dict[str, bytes]:
    """The pinned wheels for an image, downloaded once by the host (hash-checked by pip)."""
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    target = WHEEL_CACHE / digest
    if not (target / ".complete").exists():
        with _host_lock(WHEEL_CACHE / f".{digest}.lock", lambda _: None, "fetching wheels"):
            _download(requirements, target)
    return {f"wheels/{p.name}": p.read_bytes() for p in sorted(target.glob("*.whl"))}


def _download(requirements: Path, target: Path) -> None:
    """pip download into `target`, unless another process finished it while we waited."""
    if not (target / ".complete").exists():
        target.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "--platform",
            f"manylinux2014_{platform.machine()}",
            "--platform",
            f"manylinux_2_28_{platform.machine()}",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "-r",
            str(requirements),
            "-d",
            str(target),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageError(
                f"pip download for {requirements.name} failed:\n{done.stderr[-2000:]}",
                fix="check that PyPI is reachable from this host",
            )
        (target / ".complete").touch()


def _context(name: str) -> bytes:
    """A deterministic build context: the Dockerfile, the image's extra files, the package
    files, and the wheels its requirements.txt pins."""
    files: dict[str, bytes] = {}
    folder = IMAGE_DIRS[name]
    for path in sorted(folder.iterdir()):
        if path.is_file():
            files[path.name] = path.read_bytes()
    if (folder / "requirements.txt").is_file():
        files.update(wheels(folder / "requirements.txt"))
    for pattern in IMAGE_SOURCES[name]:
        for path in sorted(PACKAGE_DIR.glob(pattern)):
            files[f"assure/{path.relative_to(PACKAGE_DIR).as_posix()}"] = path.read_bytes()
    if name == "agent":
        files.update(sandbox_users())
    return _context_of(files)


def sandbox_users() -> dict[str, bytes]:
    """passwd and group lines for every uid an attempt may lease (`uids.IDS`), appended to the
    agent image's: what the agent and its checks run (`whoami`, getpass, git) finds a name."""
    return {
        "passwd.sandbox": (
            "".join(
                f"agent{uid}:x:{uid}:{uid}:assure sandbox:/tmp:/bin/sh\n" for uid in IDS
            ).encode()
        ),
        "group.sandbox": "".join(f"agent{uid}:x:{uid}:\n" for uid in IDS).encode(),
    }


def image_tag(name: str, base: str) -> str:
    """`<namespace>-<name>:<digest>`: the digest hashes the base as the default namespace names
    it."""
    ns, (_, digest) = namespace(), base.split(":")
    return f"{ns}-{name}:{_digest(f'{DEFAULT_NAMESPACE}-base:{digest}'.encode(), _context(name))}"


class Images:
    """Find or build the images for this checkout."""

    def __init__(self, backend: ImageBuilder, progress: Progress = lambda _: None):
        self.backend = backend
        self.progress = progress

    def resolve(self) -> ImageSet | None:
        """The images for the current sources, if all are built; otherwise None."""
        base = self._existing_base()
        if base is None:
            return None
        images = ImageSet(base, *(image_tag(name, base) for name in ROLES))
        return (
            images
            if all(self.backend.image_exists(getattr(images, name)) for name in ROLES)
            else None
        )

    def ensure(self) -> ImageSet:
        """Build whatever is missing (base first); never rebuild what exists, nor build what
        another process is building (the host lock, then a fresh look)."""
        with _host_lock(CACHE / BUILD_LOCK, self.progress, "building the images"):
            return self._ensure()

    def _ensure(self) -> ImageSet:
        base = self._existing_base() or self._build_base()
        tags = {}
        for name in ROLES:
            tag = tags[name] = image_tag(name, base)
            if not self.backend.image_exists(tag):
                self.progress(f"building {tag}")
                self.backend.build(_context(name), tag, {"BASE": base}, {"assure.owner": "assure"})
            repo, _ = tag.split(":")
            self.backend.tag(tag, repo, "latest")
        return ImageSet(base, **tags)

    def _existing_base(self) -> str | None:
        mode, tags = base_mode(), base_tags()
        order = [mode] if mode != "auto" else ["bootstrap", "registry"]
        return next((tags[m] for m in order if self.backend.image_exists(tags[m])), None)

    def _build_base(self) -> str:
        mode, tags = base_mode(), base_tags()
        if mode == "registry" or (mode == "auto" and self._registry_reachable()):
            self.progress(f"building {tags['registry']} from {REGISTRY_BASE}")
            context = _context_of(
                {"Dockerfile": (IMAGES_DIR / "base" / "Dockerfile.registry").read_bytes()}
            )
            self.backend.build(
                context, tags["registry"], {}, {"assure.owner": "assure"}, network=True
            )
            return tags["registry"]
        bootstrap(tags["bootstrap"], self.backend, self.progress)
        return tags["bootstrap"]

    def _registry_reachable(self) -> bool:
        self.progress(f"checking whether a registry serves {REGISTRY_BASE}")
        return self.backend.try_pull(REGISTRY_BASE)


def _context_of(files: dict[str, bytes], executable: Collection[str] = ("assure-tool",)) -> bytes:
    """A tar with fixed owners and times, so equal inputs give equal bytes (and tags)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, data in sorted(files.items()):
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime = len(data), 0
            info.mode = 0o755 if arcname in executable else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bootstrap(tag: str, backend: ImageBuilder, progress: Progress) -> None:
    """debootstrap a minimal Debian into a temporary folder, trim it, `docker import` it."""
    if shutil.which("debootstrap") is None:
        raise ImageError(
            "debootstrap is not installed and no container registry is reachable",
            fix=(
                "install it (`apt-get install debootstrap` as root), or set ASSURE_BASE=registry"
                " where a registry is reachable"
            ),
        )
    if os.geteuid() != 0:
        raise ImageError(
            "building the base image with debootstrap needs root",
            fix="run `sudo make images` once, or set ASSURE_BASE=registry",
        )
    recipe = BOOTSTRAP_RECIPE
    with tempfile.TemporaryDirectory(prefix="assure-base-", dir="/var/tmp") as tmp:
        root, log = Path(tmp) / "root", Path(tmp) / "debootstrap.log"
        progress(
            f"debootstrap {recipe['suite']} ({recipe['variant']} + {', '.join(recipe['include'])})"
            f" from {mirror()}; about a minute"
        )
        cmd = [
            "debootstrap",
            f"--variant={recipe['variant']}",
            f"--include={','.join(recipe['include'])}",
            recipe["suite"],
            str(root),
            mirror(),
        ]
        with open(log, "wb") as fh:
            done = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        if done.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise ImageError(
                f"debootstrap failed (exit {done.returncode}):\n" + "\n".join(tail),
                fix=(
                    "check that Debian's mirror is reachable over plain HTTP, or set"
                    " ASSURE_DEBIAN_MIRROR"
                ),
            )
        for rel in recipe["trim"]:
            target = root / rel
            if target.is_dir():
                for child in target.iterdir():
                    (
                        shutil.rmtree(child)
                        if child.is_dir() and not child.is_symlink()
                        else child.unlink()
                    )
        tar_path = Path(tmp) / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(tar_path), "."],
            check=True,
        )
        repo, version = tag.split(":")
        progress(f"docker import {tag}")
        backend.import_rootfs(str(tar_path), repo, version, IMPORT_CHANGES)
