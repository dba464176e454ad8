"""Primus services, each its own process."""
