"""Helpers shared by several test modules (importable because ``tests/conftest.py`` puts ``tests/`` on sys.path)."""
