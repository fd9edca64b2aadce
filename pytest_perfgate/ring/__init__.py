"""Collector/learner pairs over a shared-memory transition ring (docs/design.md §9)."""
