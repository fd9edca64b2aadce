"""``perfgate bisect``: a binary search over first-parent commits whose every probe is the
interleaved A/B comparison (docs/bisect.md).

- :mod:`.search`: :class:`Bisector`, the search itself (which commit next, skips, several
  steps, inconclusive probes), driven by an injected probe;
- :mod:`.probe`: :class:`PytestProbe`, a probe on real commits (``pytest --perfgate
  --perfgate-ab BASE`` in the candidate's worktree), and :func:`commit_range`, the input
  checks made before any worktree exists;
- :mod:`.wording`: the estimate, the progress lines and the result.
"""
