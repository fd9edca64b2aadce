"""The comparison modes: what ``perfgate.measure()`` does with a step (judged in this process
against recorded runs, interleaved A/B, instruction counts)."""
