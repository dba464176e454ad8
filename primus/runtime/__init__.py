"""Internal: what the services and workers share at run time: gRPC, heartbeats, worker start-up, settings, telemetry, hosts and cores."""
