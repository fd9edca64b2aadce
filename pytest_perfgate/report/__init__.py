"""What a run tells people: the terminal table, the JSON and markdown reports, plots, change
points, GitHub output, and a report read back for a later CI step."""
