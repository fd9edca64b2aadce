"""Default pair workloads: a MuJoCo humanoid collector and a SAC-style learner (torch; CPU
by default, ``device="cuda"`` for a GPU learner).

Both are real work at small sizes: the collector steps :class:`MujocoPool` on gymnasium's
humanoid (falls terminate, a time limit truncates; true final observations are captured
before the pool resets those envs) and runs a small MLP policy; the learner keeps a replay
buffer and does one SAC actor/critic/target update per drained batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from pytest_perfgate.ring.layout import RingSpec
from pytest_perfgate.ring.shm_ring import Ring
from pytest_perfgate.ring.sides import SideRecorder


def _mlp(torch: Any, sizes: list[int]) -> Any:
    layers: list[Any] = []
    for a, b in itertools.pairwise(sizes):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def humanoid_dims() -> tuple[int, int]:
    """(obs width, action width) of the default collector: qpos+qvel and ctrl of humanoid."""
    from pytest_perfgate.sim.models import humanoid_xml_path, load_model

    m = load_model(humanoid_xml_path())
    return int(m.nq + m.nv), int(m.nu)


class _Recorder:
    """Reward hook around the pool's FallDetector: adds a time limit and keeps the true
    final observation of each env that ended (the pool resets it right after)."""

    def __init__(self, pool: Any, max_steps: int) -> None:
        import numpy as np

        from pytest_perfgate.sim.pool import FallDetector

        self.fall = FallDetector(pool)
        self.age = np.zeros(pool.num_envs, np.int64)
        self.max_steps = max_steps
        self.term = self.trunc = np.zeros(pool.num_envs, bool)
        self.final = np.zeros((0, pool._obs.shape[1]), np.float32)

    def __call__(self, pool: Any, obs: Any, actions: Any) -> tuple[Any, Any]:
        import numpy as np

        reward, term = self.fall(pool, obs, actions)
        self.age += 1
        trunc = (self.age >= self.max_steps) & ~term
        done = term | trunc
        self.term, self.trunc = term.astype(bool), trunc
        self.final = obs[done].astype(np.float32)
        self.age[done] = 0
        return reward, done


def humanoid_spec(num_envs: int = 256, capacity: int = 8, **kw: Any) -> RingSpec:
    """The RingSpec the default collector pushes: humanoid qpos+qvel obs, ctrl actions."""
    ow, aw = humanoid_dims()
    return RingSpec(num_envs, (ow,), (aw,), capacity=capacity, **kw)


def humanoid_collector(ring: Ring, rec: SideRecorder, *, max_episode_steps: int = 1000,
                       hidden: int = 64, frame_skip: int = 5, seed: int = 0
                       ) -> Callable[[], int]:
    """Step MujocoPool(humanoid) with a small torch policy; push each step."""
    import numpy as np
    import torch

    from pytest_perfgate.sim.models import humanoid_xml_path
    from pytest_perfgate.sim.pool import MujocoPool

    n = ring.spec.num_envs
    pool = MujocoPool(humanoid_xml_path(), n, threads=1, frame_skip=frame_skip, seed=seed)
    hook = _Recorder(pool, max_episode_steps)
    pool.reward_fn = hook
    torch.manual_seed(seed)
    obs_w, act_w = pool._obs.shape[1], pool.model.nu
    policy = _mlp(torch, [obs_w, hidden, hidden, act_w])
    state = {"obs": pool._obs.astype(np.float32)}
    reward32 = np.zeros(n, np.float32)

    def once() -> int:
        obs = state["obs"]
        with rec.phase("policy"), torch.no_grad():
            action = torch.tanh(policy(torch.from_numpy(obs))).numpy()
        with rec.phase("env_step"):
            nxt, reward, _ = pool.step(action.astype(np.float64))
            nxt32 = nxt.astype(np.float32)
            np.copyto(reward32, reward, casting="unsafe")
        blocked0 = ring.blocked_ns
        with rec.phase("push"):
            ring.push(obs, action, reward32, hook.term, hook.trunc, final_obs=hook.final)
        rec.add("wait_free", ring.blocked_ns - blocked0)
        state["obs"] = nxt32
        return n

    return once


def cuda_device(device: str, torch: Any) -> Any:
    """``torch.device(device)`` for a learner, checked: ValueError names what is missing."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"learner_device={device!r}: {exc}; use 'cpu' or 'cuda' "
                         "(or 'cuda:N')") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"learner_device={device!r}: use 'cpu' or 'cuda' (or 'cuda:N')")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"learner_device={device!r}, but torch {torch.__version__} sees no "
                         "CUDA device here (a CPU build, or no driver): run the learner on "
                         "'cpu' or on a machine with a GPU")
    if dev.type == "cuda" and (dev.index or 0) >= (n := torch.cuda.device_count()):
        raise ValueError(f"learner_device={device!r}, but torch sees {n} CUDA device(s) "
                         f"here: use 'cuda:0' to 'cuda:{n - 1}'")
    return dev


class _Pinned:
    """Two page-locked host batches used in turn: one is filled while the other's
    non-blocking copy to the device may still be in flight (its event says when not)."""

    def __init__(self, torch: Any, shapes: dict[str, tuple[int, ...]]) -> None:
        self.sets = [{k: torch.empty(shape, pin_memory=True) for k, shape in shapes.items()}
                     for _ in range(2)]
        self.copied: list[Any] = [None, None]
        self.turn = 0

    def next(self) -> tuple[int, dict[str, Any]]:
        i = self.turn
        self.turn ^= 1
        if self.copied[i] is not None:
            self.copied[i].synchronize()  # its previous copy must be done before refilling
        return i, self.sets[i]


def sac_learner(ring: Ring, rec: SideRecorder, *, batch_size: int = 256, hidden: int = 64,
                buffer_steps: int = 64, seed: int = 0, device: str = "cpu"
                ) -> Callable[[], int]:
    """Drain the ring into a replay buffer; one SAC update (twin critics, actor, soft target
    update, fixed temperature) per drained batch.

    ``device="cuda"``: the networks live on the GPU; each update's sampled batch is
    gathered into page-locked host buffers and copied with non-blocking copies (phase
    ``copy_h2d``), and the phases ``copy_h2d`` and ``update`` also carry their GPU time
    from CUDA events (gpu/cuda.py PendingPhases, ring/sides.py SideRecorder.add_gpu)."""
    import numpy as np
    import torch

    dev = cuda_device(device, torch)

    sp = ring.spec
    n, ow, aw = sp.num_envs, int(np.prod(sp.obs_shape)), int(np.prod(sp.action_shape))
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cap = buffer_steps * n
    buf = {"o": np.zeros((cap, ow), np.float32), "a": np.zeros((cap, aw), np.float32),
           "r": np.zeros(cap, np.float32), "d": np.zeros(cap, np.float32),
           "o2": np.zeros((cap, ow), np.float32)}
    fill = {"pos": 0, "size": 0}
    actor = _mlp(torch, [ow, hidden, hidden, 2 * aw])
    q1, q2 = (_mlp(torch, [ow + aw, hidden, hidden, 1]) for _ in range(2))
    t1, t2 = (_mlp(torch, [ow + aw, hidden, hidden, 1]) for _ in range(2))
    t1.load_state_dict(q1.state_dict())
    t2.load_state_dict(q2.state_dict())
    for net in (actor, q1, q2, t1, t2):
        net.to(dev)
    opt_q = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=3e-4)
    opt_pi = torch.optim.Adam(actor.parameters(), lr=3e-4)
    alpha, gamma, tau = 0.2, 0.99, 0.005

    def act(o: Any) -> tuple[Any, Any]:
        mu, log_std = actor(o).chunk(2, dim=-1)
        std = log_std.clamp(-5, 2).exp()
        u = mu + std * torch.randn_like(mu)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mu) / std) ** 2 - std.log()).sum(-1) \
            - torch.log(1 - a.pow(2) + 1e-6).sum(-1)
        return a, logp

    def store(b: Any) -> None:
        k = b.transitions
        rows = (fill["pos"] + np.arange(k)) % cap
        buf["o"][rows] = b.obs.reshape(k, ow)
        buf["o2"][rows] = b.next_obs.reshape(k, ow)
        buf["a"][rows] = b.action.reshape(k, aw)
        buf["r"][rows] = b.reward.reshape(k)
        buf["d"][rows] = b.terminated.reshape(k)  # truncation bootstraps, termination not
        fill["pos"] = int((fill["pos"] + k) % cap)
        fill["size"] = min(cap, fill["size"] + k)

    keys = ("o", "a", "r", "d", "o2")
    gpu: Any = None
    pinned: _Pinned | None = None
    if dev.type == "cuda":
        from pytest_perfgate.gpu.cuda import CudaTimer, PendingPhases

        if dev.index is not None:
            torch.cuda.set_device(dev.index)  # the process's streams and events: its device
        timer = CudaTimer(torch.cuda, device=torch.cuda.current_device())
        pinned = _Pinned(torch, {k: (batch_size, *buf[k].shape[1:]) for k in keys})
        gpu = PendingPhases(timer, rec)
        timer.reset_peak()  # built: each snapshot now reads the peak since the last one
        rec.peaks = timer.take_peak

    def batch() -> tuple[Any, ...]:
        idx = rng.integers(0, fill["size"], batch_size)
        if pinned is None:
            return tuple(torch.from_numpy(buf[x][idx]) for x in keys)
        i, host = pinned.next()
        for x in keys:
            np.take(buf[x], idx, axis=0, out=host[x].numpy())
        with rec.phase("copy_h2d"):
            ev = gpu.start()
            out = tuple(host[x].to(dev, non_blocking=True) for x in keys)
            gpu.end("copy_h2d", ev)
        pinned.copied[i] = torch.cuda.Event()
        pinned.copied[i].record()
        return out

    def update(tensors: tuple[Any, ...]) -> None:
        o, a, r, d, o2 = tensors
        ev = gpu.start() if gpu is not None else None
        with torch.no_grad():
            a2, logp2 = act(o2)
            x2 = torch.cat([o2, a2], -1)
            target = r + gamma * (1 - d) * (torch.min(t1(x2), t2(x2)).squeeze(-1)
                                            - alpha * logp2)
        x = torch.cat([o, a], -1)
        loss_q = ((q1(x).squeeze(-1) - target) ** 2).mean() \
            + ((q2(x).squeeze(-1) - target) ** 2).mean()
        opt_q.zero_grad()
        loss_q.backward()
        opt_q.step()
        pa, logp = act(o)
        xa = torch.cat([o, pa], -1)
        loss_pi = (alpha * logp - torch.min(q1(xa), q2(xa)).squeeze(-1)).mean()
        opt_pi.zero_grad()
        loss_pi.backward()
        opt_pi.step()
        with torch.no_grad():
            for tgt, src in ((t1, q1), (t2, q2)):
                for pt, ps in zip(tgt.parameters(), src.parameters(), strict=True):
                    pt.mul_(1 - tau).add_(ps, alpha=tau)
        if gpu is not None:
            gpu.end("update", ev)
            gpu.flush()

    def once() -> int:
        waited0 = ring.waited_ns
        with rec.phase("drain"):
            b = ring.pop(max_steps=buffer_steps, timeout=0.05)
        rec.add("wait_data", ring.waited_ns - waited0)
        if b is None:
            return 0
        store(b)
        if pinned is None:  # the CPU learner's sampling stays inside its update phase
            with rec.phase("update"):
                update(batch())
            return b.transitions
        tensors = batch()  # its own phase, copy_h2d
        with rec.phase("update"):
            update(tensors)
        return b.transitions

    return once
