"""The README's fenced examples, by their info string: ```yaml file=PATH``` and ```sh file=PATH```
are files of a runnable example, ```sh run``` its commands, ```yaml reference``` the annotated
spec reference (placeholders allowed), ```yaml suite``` a suite as it would sit in suites/."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\S*)[ \t]*([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    language: str
    mark: str  # the info string after the language: "file=PATH", "run", "reference", "suite" or ""
    text: str
    line: int

    @property
    def file(self) -> str | None:
        return self.mark[len("file=") :] if self.mark.startswith("file=") else None


def blocks(text: str | None = None) -> list[Block]:
    text = README.read_text(encoding="utf-8") if text is None else text
    return [
        Block(m[1], m[2].strip(), m[3], text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]
