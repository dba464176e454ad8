"""The scheduler backends under the one executor contract: contract, lifecycle, one module per backend, and the registry."""
