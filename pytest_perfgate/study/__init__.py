"""Studies of the gate itself, not comparison modes: ``perfgate calibrate``.

:mod:`.calibrate` runs the trials (A/A and injected-slowdown pairs, interleaved like the A/B
mode); :mod:`.analysis` turns their records into false-alarm and detection rates
(docs/verdict-quality.md).
"""
