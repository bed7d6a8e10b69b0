"""The nightly job: re-resolve what moves, rebuild only what changed, report the drift, keep history."""
