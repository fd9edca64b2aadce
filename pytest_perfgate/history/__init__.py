"""The recorded history: the run store and its asv view, the machine and the commit a run
measured, and which recorded runs may serve as a baseline."""
