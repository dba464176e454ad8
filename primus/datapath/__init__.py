"""Internal: the data path's reading and decoding: the shared-memory arena, the data plane's wire, transforms, hashing, row identity."""
