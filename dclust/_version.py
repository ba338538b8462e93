"""The package version (the bottom of the layers: the storage layer writes it into saved models)."""

__version__ = "0.1.0"
