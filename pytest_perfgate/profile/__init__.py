"""Why it got slower: base and head profiled in interleaved turns, and subtracted.

- :mod:`.spy`: py-spy attached to a side for one turn (:class:`Recording`);
- :mod:`.stacks`: its collapsed stacks, frames named alike on both sides, flame graph files;
- :mod:`.changed`: which functions the diff between base and head touched;
- :mod:`.attribute`: the difference per function and env-step, named and explained;
- :mod:`.turns`: the interleaved turns after a verdict (:func:`profile_pair`);
- :mod:`.render`: the lines a failure shows.

Nothing here is imported until a profile is taken.
"""
