"""Two commands that find the images missing at once build each image once: the build holds
a host lock and looks again under it; pinned wheels are fetched once the same way."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from assure.sandbox.docker import images


class Builder:
    """An image store in memory whose builds take a while (an `ImageBuilder`)."""

    def __init__(self, present: set[str]):
        self.present, self.built, self.lock = set(present), [], threading.Lock()

    def image_exists(self, tag: str) -> bool:
        with self.lock:
            return tag in self.present

    def try_pull(self, reference: str) -> bool:
        return False

    def import_rootfs(self, tar_path: str, repository: str, tag: str, changes: list[str]) -> None:
        raise AssertionError("the base is there: nothing is bootstrapped")

    def build(
        self,
        context: bytes,
        tag: str,
        buildargs: dict[str, str],
        labels: dict[str, str],
        *,
        network: bool = False,
    ) -> None:
        time.sleep(0.2)
        with self.lock:
            self.built.append(tag)
            self.present.add(tag)

    def tag(self, source: str, repository: str, tag: str) -> None:
        pass


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache whose pinned wheels are already fetched (none needed: nothing reaches PyPI)."""
    monkeypatch.setattr(images, "CACHE", tmp_path)
    monkeypatch.setattr(images, "WHEEL_CACHE", tmp_path / "wheels")
    for folder in images.IMAGE_DIRS.values():
        if (folder / "requirements.txt").is_file():
            done = (
                tmp_path
                / "wheels"
                / hashlib.sha256((folder / "requirements.txt").read_bytes()).hexdigest()[:16]
            )
            done.mkdir(parents=True)
            (done / ".complete").touch()
    return tmp_path


def test_two_processes_missing_the_images_at_once_build_each_once(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSURE_BASE", "bootstrap")
    base = images.base_tags()["bootstrap"]
    builder = Builder({base})
    said: list[str] = []
    go = threading.Barrier(2)
    found: list[images.ImageSet] = []

    def ensure() -> None:
        go.wait()
        found.append(images.Images(builder, said.append).ensure())

    threads = [threading.Thread(target=ensure) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(builder.built) == sorted(
        images.image_tag(role, base) for role in images.ROLES
    )  # once each
    assert found[0] == found[1]
    assert "waiting for another assure process building the images" in said
    assert (cache / images.BUILD_LOCK).is_file()
