"""The GPU model decides comparability only for a benchmark that used the GPU: its baseline
is the runs on the same GPUs, and when none is, NO BASELINE says the GPUs differ; a CPU
benchmark on the same machine keeps its baseline across a GPU change."""

from __future__ import annotations

import types

from gpu_fakes import h100

from pytest_perfgate.core.results import BenchRecord, RunRecord
from pytest_perfgate.core.settings import Settings
from pytest_perfgate.gpu.fakes import FakeDevice, FakeNvml
from pytest_perfgate.gpu.fingerprint import gpu_metadata
from pytest_perfgate.gpu.nvml import Nvml
from pytest_perfgate.history.baseline import select_baseline
from pytest_perfgate.history.judge import HistoryJudge
from pytest_perfgate.history.machine_id import gpu_model

C1, C2, HEAD = "1" * 40, "2" * 40, "3" * 40


def meta(device: FakeDevice) -> dict:
    return {"gpu": gpu_metadata(Nvml(FakeNvml([device])), env={}, modules={})}


RTX, H100 = meta(FakeDevice()), meta(h100())


def run(run_id: str, commit: str, machine_meta: dict, *names: str) -> RunRecord:
    benches = {n: BenchRecord(name=n, samples=(1.0,), rate=1e6) for n in names}
    return RunRecord(run_id, float(len(run_id)), commit, 0, None, False, "box", "fp",
                     machine_meta, benches)


RUNS = [run("r1", C1, RTX, "learner", "walk"), run("r22", C2, H100, "learner", "walk")]


def test_only_a_gpu_benchmark_is_held_to_the_same_gpus() -> None:
    def baseline(name: str, gpu: str | None) -> list[str]:
        got = select_baseline(RUNS, name, fingerprint="fp", head_commit=HEAD,
                              is_ancestor=lambda c: set(c), gpu=gpu)
        return [r.run_id for r, _ in got]

    assert baseline("walk", None) == ["r22", "r1"]  # numpy only: the GPU is not its machine
    assert baseline("learner", gpu_model(H100)) == ["r22"]
    answers = h100()
    answers.attributes = "answer"  # a driver that gives a whole GPU's SM count: same GPUs
    assert baseline("learner", gpu_model(meta(answers))) == ["r22"]


def test_no_baseline_says_the_earlier_runs_were_on_other_gpus() -> None:
    ctx = types.SimpleNamespace(runs=RUNS[:1], fingerprint="fp", machine="box", meta=H100,
                                git=types.SimpleNamespace(commit=HEAD, available=True,
                                                          dirty=False, reason=""))
    judge = HistoryJudge(context=None, settings=Settings())  # type: ignore[arg-type]
    why = judge._why_no_baseline(ctx, "learner", uses_gpu=True)  # type: ignore[arg-type]
    assert why == (
        "no earlier run of learner on machine 'box', fingerprint fp ran on its GPUs: 1 "
        "run(s) of it were on other GPUs (1 on NVIDIA GeForce RTX 5090 (cc 12.0); this run: "
        "NVIDIA H100 80GB HBM3 (cc 9.0)), and a benchmark that used the GPU is compared only "
        "with runs on the same GPUs; this run is recorded at the end of the session and "
        "becomes the baseline of later commits")
