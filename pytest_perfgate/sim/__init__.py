"""MuJoCo workloads: batched pools sized to the CPUs, settled states, vector envs, and the
thread and batch sweeps (docs/design.md §7)."""
