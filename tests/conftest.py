"""Every test trusts the checkout's example ratifier (specs/ratifiers.yaml), and only it: the
specs in specs/, suites/ and those the tests write are signed with its published key."""

from __future__ import annotations

import os

from tests.contracts import KEYRING

os.environ["ASSURE_RATIFIERS"] = str(KEYRING)
