"""The in-process workload: a ``step()`` function called in a loop until the window closes.

The loop is the measured code's only overhead, so it holds what it needs in locals and
reads the clock once per call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_perfgate.core.timing import SYSTEM_CLOCK, Clock, PhaseRecorder, activate
from pytest_perfgate.core.tree import PeakMemory, ProcessTree
from pytest_perfgate.core.window import RawWindow

if TYPE_CHECKING:
    from pytest_perfgate.gpu.cuda import CudaTimer


class LoopSource:
    """Calls ``step()`` (which advances ``transitions`` env-steps) until the window closes.

    A window's memory is the process tree's (:mod:`.tree`: this process and its
    descendants, read at the window's edges), and with the system clock so are its CPU time
    and its phases' (a fake clock's CPU time is the test's to script); ``tree=None`` counts
    this process's CPU alone and samples no memory.

    Once the process has initialised CUDA through torch (looked for before each window,
    never by importing torch), the window's edges synchronise the device and the phases
    are CUDA-timed too (gpu/cuda.py, docs/gpu.md); ``cuda=False`` keeps host timers only,
    to show what they alone would say (tools/gpu_check.py).
    """

    def __init__(self, step: Callable[[], object], transitions: int,
                 recorder: PhaseRecorder | None = None, clock: Clock = SYSTEM_CLOCK,
                 tree: ProcessTree | bool | None = True, cuda: bool = True) -> None:
        if isinstance(transitions, bool) or not isinstance(transitions, int) or transitions < 1:
            raise ValueError(f"transitions={transitions!r}: pass the number of env-steps one "
                             "call of step() advances, a positive int (e.g. num_envs)")
        if not callable(step):
            raise TypeError(f"step={step!r} is not callable: pass a function that advances "
                            "the environments once")
        self.step = step
        self.transitions = transitions
        self.recorder = recorder or PhaseRecorder(clock)
        self._clock = clock
        self.tree: ProcessTree | None = ProcessTree() if tree is True else (tree or None)
        self._tree_cpu = self.tree is not None and clock is SYSTEM_CLOCK
        self.peak = PeakMemory()
        self._started = False
        self.cuda: CudaTimer | None = None
        self._look_for_cuda = cuda
        if cuda and os.environ.get("PERFGATE_CUDA_SYNC"):  # a bad value fails before measuring
            from pytest_perfgate.gpu.cuda import sync_mode

            sync_mode()
        if self._tree_cpu and self.tree is not None:
            self.recorder.count_children(self.tree)

    def _cuda(self) -> CudaTimer | None:
        """The CUDA timer once the process initialised CUDA (checked each window until then:
        the step's first call is often what initialises it)."""
        if self.cuda is None and self._look_for_cuda and "torch" in sys.modules:
            from pytest_perfgate.gpu.cuda import timer_if_active

            self.cuda = timer_if_active()
            if self.cuda is not None:
                self.cuda.synchronize()
                self.recorder.use_device(self.cuda)
                self.cuda.reset_peak()
        return self.cuda

    def run_window(self, duration_s: float) -> RawWindow:
        wall, cpu, step = self._clock.wall_ns, self._clock.cpu_ns, self.step
        tree = self.tree
        if tree is not None:
            if self._tree_cpu:
                cpu = tree.cpu_ns
            if not self._started:
                self._started = True
                tree.start()  # this measurement's memory peak starts here
            else:
                tree.refresh()
            self.peak.add(tree.memory)
        cuda = self._cuda()
        if cuda is not None:
            cuda.synchronize()  # work queued before the window is not the window's
        limit = int(duration_s * 1e9)
        self.recorder.take()
        calls = 0
        with activate(self.recorder):
            c0 = cpu()
            t0 = wall()
            while True:
                step()
                calls += 1
                if wall() - t0 >= limit:
                    break
            if cuda is not None:
                cuda.synchronize()  # the window's queued work finishes inside it
            t1 = wall()
            c1 = cpu()
        if tree is not None:
            if self._tree_cpu:
                c1 += tree.settle()  # reaped by a descendant meanwhile
            if tree.refresh():
                if self._tree_cpu:
                    c1 += tree.late_ns  # started meanwhile
                self.peak.add(tree.memory)
        memory = self.peak.summary()
        if cuda is not None:
            memory.update(cuda.memory())
        return RawWindow(calls * self.transitions, (t1 - t0) / 1e9, (c1 - c0) / 1e9,
                         self.recorder.take(), calls, memory=memory,
                         gpu=cuda.describe() if cuda is not None else {})

