"""assure: run an untrusted agent in a sealed container and judge it by ground truth.

This package's `client`, `chain`, `gate` and `gateway` modules are copied into the
container images, so they (and this file) import only the standard library.
"""

__version__ = "0.1.0"
