"""Support code for the scaling benchmark: a deterministic cluster simulator that runs the live autoscaling policy."""
