"""Operating runs from outside: the out-of-band monitor, its health manifests and alerts."""
