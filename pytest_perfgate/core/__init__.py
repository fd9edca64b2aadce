"""The measurement core: clocks, windows and the Meter, the load probe, the gate, the
result model, and the one supervisor of child processes."""
