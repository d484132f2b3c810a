"""The benchmark command (``python -m torchkiln bench`` / ``overhead``) and its model zoo."""
