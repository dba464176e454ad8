"""Primus shared package: spec models, errors, RPC helpers, telemetry and generated contracts."""
