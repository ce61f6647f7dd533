"""Helpers shared by tests of several directories (import as ``tests.util.<module>``)."""
