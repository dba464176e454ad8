"""Master service: accepts jobs, persists them, drives their lifecycle and writes their reports."""
