"""`python -m assure.cli`."""

from __future__ import annotations

import sys

from assure.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
