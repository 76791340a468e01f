"""The package version, defined once (the root, doctor, the CLI and the bench all read it here)."""

__version__ = "0.1.0"
