"""The ring's streaming copy (ring/stream.py, ring/_stream.c): byte-exact at every
alignment and length, numpy's rules wherever it does not apply, its switches, and the
ring's reads through it giving exactly what numpy's copy gives."""

from __future__ import annotations

import platform
import shutil
import sys
from typing import Any

import numpy as np
import pytest
from helpers import need_tool
from ring_steps import check_batches, episode, keep_copy, push_step

from pytest_perfgate.ring import stream
from pytest_perfgate.ring.layout import RingInputError, RingSpec
from pytest_perfgate.ring.shm_ring import Ring

X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Look the extension up again, with this test's environment."""
    monkeypatch.setattr(stream, "_impl", False)
    monkeypatch.delenv(stream.ENV, raising=False)


def _ext() -> Any:
    try:
        from pytest_perfgate.ring import _stream
    except ImportError:
        pytest.skip("ring/_stream.c is not built here")
    return _stream


def test_the_extension_is_built_where_a_compiler_is(fresh: None) -> None:
    """Installing with a C compiler builds it; on x86-64 it streams."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        need_tool("needs a C compiler to build ring/_stream.c (apt-get install gcc)")
    try:
        from pytest_perfgate.ring import _stream as ext
    except ImportError as e:
        need_tool(f"ring/_stream.c was not built ({e}): reinstall (pip install -e .) and "
                  "read the build's warning")
    assert ext.STREAMING == int(X86)
    assert stream.available() == X86


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 1000, 4099,
                               (1 << 20) + 13])
def test_every_alignment_and_length_copies_exactly_and_nothing_else(n: int) -> None:
    """Head bytes up to the 16-byte boundary, 64-byte blocks, a tail: for each source and
    destination misalignment, dst equals src and the guard bytes around it are untouched."""
    ext = _ext()
    rng = np.random.default_rng(n)
    src_buf = rng.integers(0, 256, n + 64, dtype=np.uint8)
    for s_off in (0, 1, 7, 16, 33):
        for d_off in (0, 1, 9, 16, 31):
            dst_buf = np.full(n + 64, 0xAB, np.uint8)
            ext.copy(dst_buf[d_off:d_off + n], src_buf[s_off:s_off + n])
            np.testing.assert_array_equal(dst_buf[d_off:d_off + n], src_buf[s_off:s_off + n])
            assert (dst_buf[:d_off] == 0xAB).all() and (dst_buf[d_off + n:] == 0xAB).all()


def test_overlapping_buffers_are_moved_not_streamed() -> None:
    ext = _ext()
    buf = np.arange(5000, dtype=np.uint8)
    want = buf[:4000].copy()
    ext.copy(buf[3:4003], buf[:4000])
    np.testing.assert_array_equal(buf[3:4003], want)


def test_what_the_extension_refuses_it_names() -> None:
    ext = _ext()
    with pytest.raises(ValueError, match="destination has 9 bytes, source 16"):
        ext.copy(np.zeros(9, np.uint8), np.zeros(16, np.uint8))
    with pytest.raises((BufferError, ValueError)):  # not C-contiguous
        ext.copy(np.zeros((8, 8), np.uint8)[:, ::2], np.zeros(32, np.uint8))
    ro = np.zeros(16, np.uint8)
    ro.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        ext.copy(ro, np.zeros(16, np.uint8))


def test_copy_follows_numpy_where_it_cannot_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Casts, broadcasts, strided views and torch tensors: numpy's (or torch's) result."""
    monkeypatch.setattr(stream, "STREAM_MIN", 0)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 40)).astype(np.float32)
    for dst in (np.zeros((64, 40), np.float64), np.zeros((40, 64), np.float32).T,
                np.zeros((64, 40), np.float32)):
        stream.copy(dst, a)
        np.testing.assert_array_equal(dst, a)
    row = np.zeros((64, 40), np.float32)
    stream.copy(row, a[0])  # a broadcast
    assert (row == a[0]).all()
    with pytest.raises(ValueError, match="broadcast"):
        stream.copy(np.zeros((3, 3)), np.zeros((4, 4)))
    ro = np.zeros((64, 40), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # numpy's own message
        stream.copy(ro, a)
    torch = pytest.importorskip("torch")
    t = torch.zeros(64, 40)
    stream.copy(t, a)
    np.testing.assert_array_equal(t.numpy(), a)
    bf = torch.zeros(64, 40, dtype=torch.bfloat16)  # no numpy view: torch's copy_
    stream.copy(bf, a)
    assert torch.equal(bf, torch.from_numpy(a).to(torch.bfloat16))


def test_arrays_of_references_are_copied_by_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """An object array's bytes are pointers: copied raw, dst would hold references it does
    not own. numpy's copy counts them."""
    monkeypatch.setattr(stream, "STREAM_MIN", 0)
    item = object()
    src = np.empty(1000, object)
    src[:] = [item] * 1000
    dst = np.empty(1000, object)
    before = sys.getrefcount(item)
    stream.copy(dst, src)
    assert sys.getrefcount(item) == before + 1000 and dst[999] is item
    del src
    assert all(x is item for x in dst)


def test_the_switch_turns_it_off_requires_it_or_names_a_bad_value(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(stream.ENV, "0")
    assert not stream.available() and stream.copier(1 << 30) is stream.plain
    monkeypatch.setattr(stream, "_impl", False)
    monkeypatch.setenv(stream.ENV, "yes")
    with pytest.raises(stream.StreamCopyError, match=r"PERFGATE_STREAM_COPY='yes': use 0"):
        stream.available()
    monkeypatch.setattr(stream, "_impl", False)
    monkeypatch.setenv(stream.ENV, "1")
    monkeypatch.setitem(sys.modules, "pytest_perfgate.ring._stream", None)  # not built
    with pytest.raises(stream.StreamCopyError,
                       match="was not built: reinstall with a C compiler.*unset it"):
        stream.copier(1 << 30)
    monkeypatch.setattr(stream, "_impl", False)
    monkeypatch.delenv(stream.ENV)
    assert not stream.available()  # not built, not required: numpy's copy, no error
    assert stream.copier(1 << 30) is stream.plain


def test_small_fields_use_numpy_and_big_ones_stream(fresh: None) -> None:
    if not stream.available():
        pytest.skip("no streaming copy here")
    assert stream.copier(stream.STREAM_MIN - 1) is stream.plain
    assert stream.copier(stream.STREAM_MIN) is not stream.plain


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every field is big enough, and each streamed copy is counted (numpy does it)."""
    calls: list[int] = []

    def fake(dst: Any, src: Any) -> None:
        calls.append(dst.nbytes)
        dst[...] = src

    monkeypatch.setattr(stream, "_impl", fake)
    monkeypatch.setattr(stream, "STREAM_MIN", 0)
    return calls


@pytest.mark.parametrize("use_stream", [True, False])
@pytest.mark.parametrize("critic", [False, True])
def test_pops_through_the_streaming_copy_match_the_reference(
        monkeypatch: pytest.MonkeyPatch, use_stream: bool, critic: bool) -> None:
    """The short path (one held step) and the general one (several steps per pop) copy
    through the buffers' copier; with stream=False through numpy's; both exact."""
    calls = _counted(monkeypatch)
    rng = np.random.default_rng(11)
    ref = episode(rng, 5, 60, 0.15, 0.15, critic)
    spec = RingSpec(5, (3,), (2,), capacity=3, critic_shape=(2,) if critic else None)
    got: list[Any] = []
    with Ring(spec) as ring:
        out = ring.buffers(2, stream=use_stream)
        for i, s in enumerate(ref):
            assert push_step(ring, s, critic)
            if i % 3 == 2:  # now one step, now a run of them
                while (b := ring.pop(max_steps=1 + i % 2, out=out, timeout=0)) is not None:
                    keep_copy(got, b)
        ring.finish(ref[-1]["ret_next"], ref[-1]["ret_cnext"] if critic else None)
        while (b := ring.pop(max_steps=2, out=out, timeout=0)) is not None:
            keep_copy(got, b)
    check_batches(got, ref, critic)
    assert (len(calls) > len(ref)) if use_stream else not calls


def test_buffers_name_a_bad_stream_value() -> None:
    with Ring(RingSpec(2, (3,), (2,), capacity=2)) as ring, pytest.raises(
            RingInputError, match=r"stream='yes': pass True .* or False"):
        ring.buffers(2, stream="yes")  # type: ignore[arg-type]


def test_the_copy_in_use_is_named_for_the_run_record(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """True (streaming stores), False (switched off) or "unavailable" (not built, or a
    value buffers() refuses); in the run's metadata only once a ring was mapped here."""
    assert stream.mode() is stream.available()
    monkeypatch.setenv(stream.ENV, "0")
    monkeypatch.setattr(stream, "_impl", False)
    assert stream.mode() is False
    monkeypatch.setenv(stream.ENV, "yes")
    monkeypatch.setattr(stream, "_impl", False)
    assert stream.mode() == "unavailable"
    monkeypatch.delenv(stream.ENV)
    monkeypatch.setattr(stream, "_impl", False)
    monkeypatch.setitem(sys.modules, "pytest_perfgate.ring._stream", None)  # not built
    assert stream.mode() == "unavailable"
    monkeypatch.setattr(stream, "_mapped", False)
    assert stream.run_metadata() == {}
    Ring(RingSpec(2, (3,), (2,), capacity=2)).close()
    assert stream.run_metadata() == {"ring_stream_copy": "unavailable"}


@pytest.mark.parametrize("mapped", [False, True])
def test_a_recorded_run_says_which_copy_its_rings_used(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, mapped: bool) -> None:
    from pytest_perfgate.core.results import BenchResult
    from pytest_perfgate.core.timing import FakeClock
    from pytest_perfgate.session.gating import GateSession
    from pytest_perfgate.session.options import Options

    monkeypatch.setattr(stream, "_mapped", mapped)
    monkeypatch.setattr(stream, "mode", lambda: False)  # as with PERFGATE_STREAM_COPY=0
    opts = Options(enabled=True, machine="box", results_dir=str(tmp_path / "results"))
    s = GateSession(opts, tmp_path, FakeClock())
    s.judge(BenchResult("walk", (10.0, 10.1, 9.9, 10.0), 1e5), "t::walk")
    run = s.finish()
    assert run is not None and run.metadata["mode"] == "history"
    assert run.metadata.get("ring_stream_copy", "absent") == (False if mapped else "absent")


def test_a_pair_records_the_copy_its_learner_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_perfgate.ring import pair

    monkeypatch.setattr(pair, "stream_mode", lambda: "unavailable")
    p = pair.RingPair(RingSpec(2, (3,), (2,), capacity=2))  # checked, not started
    assert p.metadata()["ring_pair"]["stream_copy"] == "unavailable"
