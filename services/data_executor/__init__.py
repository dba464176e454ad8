"""Data executor service: leases data tasks, reads and transforms them, serves record batches."""
