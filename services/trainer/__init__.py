"""Trainer service: consumes served batches and trains a CTR model."""
