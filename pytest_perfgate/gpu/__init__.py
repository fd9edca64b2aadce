"""The GPU concern: CUDA-correct timing, NVML readings, the GPU in the fingerprint and the
noise guard, GPU memory (docs/gpu.md).

Nothing here imports torch or pynvml at module load: a process that never touched CUDA
pays nothing. torch is only looked at when the measured process already imported it and
initialised CUDA (:func:`pytest_perfgate.gpu.cuda.active_cuda`).
"""
