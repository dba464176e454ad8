"""Primus's Python package: the public SDK at the top, the internals in packages by concern beneath it.

The public SDK, whose import paths users rely on: primus.client (PrimusClient, over a master's API), primus.data (the
data client a user's training loop iterates), primus.batch (Batch), primus.models (entry points, the built-in DLRM, the
sparse optimizers), primus.spec (the job document), primus.metrics (evaluation metrics), and the types they hand out,
primus.errors and primus.job_state.

Internal, free to change: primus.cli (the primus command) and primus.tools (what it runs: consoles, a local cluster,
demo, cost, digests), primus.explorer (`primus explore`), primus.runtime (what services and workers share at run time),
primus.auth (tokens, identities, access rules, guards, TLS), primus.datapath (the arena, transforms, row identity),
primus.records (the job report and what it holds), primus.sources (the source adapters), primus.native (the C++ arena)
and primus.v1 (the generated contracts). pyproject.toml's import-linter contracts keep the layers apart.
"""
