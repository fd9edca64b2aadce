"""Instruction counts under callgrind: a counting worker per perf test, its counts judged
beside steps/s (``--perfgate-counts``, docs/design.md §10)."""
