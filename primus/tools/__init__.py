"""Internal: the user-facing tools beside primus.cli: consoles, job views, a local cluster and its CA, demo data, cost, digests, access verbs."""
