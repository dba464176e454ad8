"""Planner service: turns sources and a time range into a task graph, leases tasks, keeps the ledger."""
