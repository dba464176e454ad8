"""Support code for the hybrid benchmark: a drifting synthetic CTR dataset and MovieLens-100k, in batch, landing-stream and clicks layouts."""
