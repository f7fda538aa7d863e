"""Running: the run specification, finalize, canary."""
