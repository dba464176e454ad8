"""Internal: the typed records a run writes and the tools read: the job report, the trainer's result, the scaling log, cost counters."""
