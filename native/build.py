"""Build the shared-memory arena extension in place, against the installed pyarrow (no build isolation)."""
