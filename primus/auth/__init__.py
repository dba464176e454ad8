"""Internal: who may call what and how it is proven: bearer tokens, identities, JWTs, access rules, RBAC, guards and TLS settings."""
