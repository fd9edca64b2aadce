"""A benchmark's measurement and its judged record are two types; the sidecar stays one flat
object per benchmark, so files written before the split read back unchanged."""

from __future__ import annotations

import dataclasses
import json

from pytest_perfgate.core.results import BenchRecord, BenchResult, PhaseSummary, RunRecord

# One benchmark of a sidecar exactly as versions before the split wrote it: measurement and
# judgement side by side in one object.
WRITTEN_BEFORE = {
    "name": "walk", "samples": [250.0, 251.0, 249.0], "steps_per_s": 4000.0, "cores": 1.0,
    "steady": True, "warmup_s": 1.5, "warmup_windows": 6, "remeasured": 1, "polluted_kept": 0,
    "transitions": 64, "phases": {"physics": {"ms_per_call": 0.2, "share": 0.8, "cores": 1.0}},
    "source": "perfgate", "unit": "env-steps/s", "extra": {"placement": "cpus 0-1"},
    "verdict": "REGRESSION", "threshold": 0.05, "test_file": "perf/test_walk.py",
    "test_line": 12, "memory": {"peak_rss": 1 << 26},
}


def _run(bench: dict) -> dict:
    return {"perfgate_format": 1, "run_id": "20240101T000000-aa0000", "started_at": 1.7e9,
            "commit": "ab" * 20, "commit_date_ms": 0, "branch": "main", "dirty": False,
            "machine": "box", "fingerprint": "f" * 12, "metadata": {},
            "benchmarks": {bench["name"]: bench}}


def test_a_sidecar_written_before_the_split_reads_as_a_record():
    run = RunRecord.from_json(json.loads(json.dumps(_run(WRITTEN_BEFORE))))
    b = run.benchmarks["walk"]
    assert isinstance(b, BenchRecord)
    assert (b.verdict, b.threshold, b.where) == ("REGRESSION", 0.05, ("perf/test_walk.py", 12))
    assert b.samples == (250.0, 251.0, 249.0) and b.phases["physics"] == PhaseSummary(0.2, 0.8, 1.0)
    assert run.to_json()["benchmarks"]["walk"] == WRITTEN_BEFORE  # written back the same


def test_a_measurement_reads_no_judgement_and_a_record_without_one_has_none():
    m = BenchResult.from_json(WRITTEN_BEFORE)
    assert type(m) is BenchResult and not hasattr(m, "verdict")
    unjudged = {k: v for k, v in WRITTEN_BEFORE.items()
                if k not in ("verdict", "threshold", "test_file", "test_line")}
    r = BenchRecord.from_json(unjudged)
    assert (r.verdict, r.threshold, r.where) == (None, None, None)


def test_a_record_of_a_measurement_carries_every_measured_field():
    m = BenchResult.from_json(WRITTEN_BEFORE)
    r = BenchRecord.of(m, "OK", 0.1, ("perf/x.py", 3))
    assert all(getattr(r, f.name) == getattr(m, f.name) for f in dataclasses.fields(m))
    assert (r.verdict, r.threshold, r.test_file, r.test_line) == ("OK", 0.1, "perf/x.py", 3)
    assert BenchRecord.of(m).to_json().keys() == r.to_json().keys()
