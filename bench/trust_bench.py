"""What the trust ledger costs per attempt: the append (receipt checked, entry signed, checkpoint
re-signed), the lookup promote makes (checkpoint checked, no entry re-verified), and the bytes,
at ledgers of growing length; and the full offline replay (`assure trust verify`) for contrast.

    PYTHONPATH=. .venv/bin/python bench/trust_bench.py [N ...]     (default 10 100 1000)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from assure.records import trust
from tests.unit.test_trust import NOW, receipt

GAP = 30.0  # seconds between attempts: 120 an hour, all in the freshness window


def main(sizes: list[int]) -> None:
    key = Ed25519PrivateKey.generate()
    print("entries  append_ms  lookup_ms  entry_bytes  checkpoint_bytes  full_verify_ms")
    with tempfile.TemporaryDirectory() as tmp:
        book = trust.Ledger(Path(tmp) / "t", key.public_key())
        n = 0
        for size in sizes:
            while n < size - 5:
                book.append(receipt(key, book, n, at=NOW + n * GAP), key, NOW + n * GAP)
                n += 1
            before = book.path.stat().st_size if book.path.exists() else 0
            took = []
            for _ in range(5):  # the median of 5 appends: the machine is shared
                at = NOW + n * GAP
                r = receipt(key, book, n, at=at)
                t0 = time.perf_counter()
                book.append(r, key, at)
                took.append((time.perf_counter() - t0) * 1000)
                n += 1
            append_ms = statistics.median(took)
            before = book.path.stat().st_size - (book.path.stat().st_size - before) // 5
            t0 = time.perf_counter()
            for _ in range(20):
                book.state(at)
            lookup_ms = (time.perf_counter() - t0) * 1000 / 20
            t0 = time.perf_counter()
            trust.verify_ledger(book.path, key.public_key(), at)
            full_ms = (time.perf_counter() - t0) * 1000
            print(
                f"{n:7d}  {append_ms:9.2f}  {lookup_ms:9.2f} "
                f" {book.path.stat().st_size - before:11d}  {book.checkpoint.stat().st_size:16d} "
                f" {full_ms:14.1f}"
            )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
