"""The library API: the use cases, callable from Python (docs/python-api.md)."""
