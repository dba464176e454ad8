"""The freshness benchmark's parts: the trainer's loop that stamps each step, and the figures from its stamps."""
