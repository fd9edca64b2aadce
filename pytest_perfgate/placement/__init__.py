"""Where workers run: CPU sets, NUMA memory policy, thread caps, and spawn workers placed
before they import their workload (docs/design.md §4)."""
