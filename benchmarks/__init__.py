"""pytest-perfgate's asv suite: run by `asv run` / `asv continuous` (see README, "asv")."""
