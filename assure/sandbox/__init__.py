"""The sandbox: hardened container settings, the Docker backend, and the images."""
