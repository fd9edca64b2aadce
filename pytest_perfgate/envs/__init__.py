"""Each side's environment: a tree's dependency declarations, and the Python environment that
honours them, built with a maintained installer (docs/environment.md)."""
