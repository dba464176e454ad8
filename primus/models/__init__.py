"""Models the trainer can build: the entry-point loader and the built-in DLRM."""
