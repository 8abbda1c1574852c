"""`python -m assure.cli`."""

from __future__ import annotations

from assure.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
