"""pytest-perfgate's asv suite: run by `asv run` / `asv continuous` (docs/history-asv.md, "asv")."""
