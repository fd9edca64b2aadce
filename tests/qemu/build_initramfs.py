"""Build the initramfs for the emulated multi-NUMA machine (tests/test_numa_qemu.py).

The image carries: a static busybox, the *running* CPython (its binary, shared libraries
found with ldd, a trimmed stdlib with its bytecode), the ``pytest_perfgate`` sources, the
packages the guest's processes import (psutil; numpy with its bundled ``numpy.libs``, for
the ring), the guest scripts and workload from this directory, and an ``/init`` that mounts
proc, sysfs and devtmpfs, runs one guest script, prints its exit status and powers the
machine off. The kernel command line picks the script: ``perfgate_guest=guest_ring`` (the
kernel hands unknown ``name=value`` parameters to init as environment variables); without
it, guest_numa. One image serves every guest test.

Everything keeps its host path inside the guest, so the interpreter finds its stdlib and
libraries exactly as on the host (no PYTHONHOME, no rpath games). The cpio (newc) archive is
written here in Python (no root, no cpio tool needed: /dev/console is a header, not a
mknod), gzip-compressed, and cached under a directory keyed by a hash of every input.

Usage: ``python tests/qemu/build_initramfs.py [--cache-dir DIR]`` prints the image path.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PACKAGE = REPO / "pytest_perfgate"
GUEST_DIR = "/opt/perfgate"  # the package and the guest scripts live here in the guest
GUEST_FILES = ("guest_numa.py", "guest_ring.py", "guest_workload.py")
# What the guest's processes import besides the stdlib and pytest_perfgate.
GUEST_PACKAGES = ("psutil", "numpy")
# Parts of those packages nothing in the guest imports (build tools, test suites).
PACKAGE_SKIP_DIRS = {"tests", "testing", "f2py", "distutils", "_pyinstaller", "_examples",
                     "typing", "include"}
PACKAGE_SKIP_SO = re.compile(r"^_(simd|multiarray_tests|umath_tests|rational_tests|"
                             r"struct_ufunc_tests|operand_flag_tests)\.")
FORMAT_VERSION = "1"  # bump to invalidate every cached image

# Stdlib parts the guest never imports (and the biggest ones).
STDLIB_SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                    "pydoc_data", "site-packages", "dist-packages", "venv", "distutils",
                    "sqlite3", "curses", "dbm", "xmlrpc", "wsgiref", "__phello__"}
STDLIB_SKIP_PREFIXES = ("config-",)
# Extension modules that pull large or irrelevant libraries (X11, Tcl, ssl, ncurses...).
DYNLOAD_SKIP = re.compile(r"^(_tkinter|_test|_ctypes_test|_xx|xxlimited|_curses|readline|"
                          r"_sqlite3|_ssl|_hashlib|_dbm|_gdbm|nis|spwd|ossaudiodev|audioop|"
                          r"_crypt|_uuid)")

INIT_SCRIPT = f"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mkdir -p /dev/shm
/bin/busybox mount -t tmpfs tmpfs /dev/shm
export PATH=/bin HOME=/tmp TMPDIR=/tmp PYTHONPATH={GUEST_DIR} PYTHONUNBUFFERED=1
echo PERFGATE_GUEST_BOOTED uptime=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
case "$perfgate_guest" in
  guest_ring) script=guest_ring ;;
  *) script=guest_numa ;;
esac
@PYTHON@ -S {GUEST_DIR}/$script.py
echo PERFGATE_GUEST_EXIT=$? uptime=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
/bin/busybox sync
/bin/busybox poweroff -f
"""


class Missing(RuntimeError):
    """A host piece the image needs is absent; the message names it and how to install it."""


# ---- host inputs ------------------------------------------------------------------------

def is_static_elf(path: Path) -> bool:
    """True when ``path`` is an ELF executable without a PT_INTERP (dynamic loader)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only
        return False
    endian = "<" if data[5] == 1 else ">"
    phoff, = struct.unpack_from(endian + "Q", data, 0x20)
    phentsize, phnum = struct.unpack_from(endian + "HH", data, 0x36)
    for i in range(phnum):
        p_type, = struct.unpack_from(endian + "I", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def find_busybox() -> Path:
    for cand in (os.environ.get("PERFGATE_QEMU_BUSYBOX"), "/bin/busybox", "/usr/bin/busybox",
                 shutil.which("busybox")):
        if cand and Path(cand).is_file() and is_static_elf(Path(cand)):
            return Path(cand)
    raise Missing("a static busybox (/bin/busybox from the Debian package busybox-static; "
                  "apt-get install -y busybox-static)")


def python_layout() -> tuple[Path, Path, Path]:
    """(interpreter binary, stdlib dir, lib-dynload dir) of the running Python's base."""
    exe = Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))
    stdlib = Path(sysconfig.get_path("stdlib"))
    dynload = Path(sysconfig.get_config_var("DESTSHARED") or stdlib / "lib-dynload")
    if not (stdlib / "os.py").is_file() or not dynload.is_dir():
        raise Missing(f"the stdlib of {exe} (looked for {stdlib}/os.py and {dynload})")
    return exe, stdlib, dynload


def ldd(paths: list[Path]) -> set[Path]:
    """Shared libraries (and the dynamic loader) that ``paths`` need, resolved by ldd."""
    if shutil.which("ldd") is None:
        raise Missing("ldd (Debian package libc-bin)")
    out: set[Path] = set()
    for chunk in range(0, len(paths), 64):
        proc = subprocess.run(["ldd", *map(str, paths[chunk:chunk + 64])], capture_output=True,
                              text=True, timeout=60)
        for line in proc.stdout.splitlines():
            if "not found" in line:
                raise Missing(f"a shared library of the interpreter: ldd says {line.strip()!r}")
            m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if m:
                out.add(Path(m.group(1)))
    return out


def _pyc_for(src: Path, st: os.stat_result) -> bytes:
    """The cached bytecode of ``src`` if fresh, else compiled in memory; b"" if it does not
    compile."""
    tag = sys.implementation.cache_tag
    cached = src.parent / "__pycache__" / f"{src.stem}.{tag}.pyc"
    magic = importlib.util.MAGIC_NUMBER
    try:
        data = cached.read_bytes()
        flags, mtime, size = struct.unpack_from("<III", data, 4)
        if data[:4] == magic and flags == 0 and mtime == int(st.st_mtime) & 0xFFFFFFFF \
                and size == st.st_size & 0xFFFFFFFF:
            return data
    except (OSError, struct.error):
        pass
    try:
        code = compile(src.read_bytes(), str(src), "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return b""  # a file being edited: ship the source alone; importing it will say why
    from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore
    return bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))


class Entry:
    """One archive member: a directory, a file (from disk or bytes), a symlink or a device."""

    def __init__(self, name: str, mode: int, *, src: Path | None = None, data: bytes = b"",
                 mtime: int = 0, rdev: tuple[int, int] = (0, 0)) -> None:
        self.name, self.mode, self.src, self.data = name.lstrip("/"), mode, src, data
        self.mtime, self.rdev = mtime, rdev

    def key(self) -> str:
        """What the cache hash sees: name, mode, and size+mtime (disk) or content (bytes)."""
        if self.src is not None:
            st = self.src.stat()
            return f"{self.name}|{self.mode:o}|{self.src}|{st.st_size}|{st.st_mtime_ns}"
        return f"{self.name}|{self.mode:o}|{hashlib.sha256(self.data).hexdigest()}"


def package_dirs(name: str) -> list[Path]:
    """The directory of the importable package ``name`` and, when its wheel has one, the
    ``<name>.libs`` directory beside it (auditwheel's bundled libraries, which the
    package's extension modules find through an rpath of ``$ORIGIN/../..``)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"{name} is not importable here: pip install {name}")
    root = Path(next(iter(spec.submodule_search_locations)))
    libs = root.parent / f"{name}.libs"
    return [root, libs] if libs.is_dir() else [root]


def collect() -> tuple[list[Entry], Path]:
    """Every member of the image, plus the guest interpreter's path."""
    busybox = find_busybox()
    exe, stdlib, dynload = python_layout()
    entries: dict[str, Entry] = {}

    def add_file(src: Path, name: str | None = None, mode: int | None = None) -> None:
        st = src.stat()
        name = (name or str(src)).lstrip("/")
        entries[name] = Entry(name, mode or (stat.S_IFREG | (st.st_mode & 0o777)), src=src,
                              mtime=int(st.st_mtime))

    def add_py(src: Path, name: str) -> None:
        """A module and its bytecode (so neither the guest nor its workers compile)."""
        st = src.stat()
        add_file(src, name)
        pyc = _pyc_for(src, st)
        if not pyc:
            return
        pyc_name = f"{Path(name).parent}/__pycache__/{src.stem}.{sys.implementation.cache_tag}.pyc"
        entries[pyc_name.lstrip("/")] = Entry(pyc_name, stat.S_IFREG | 0o644,
                                              data=pyc, mtime=int(st.st_mtime))

    # busybox and its applets
    add_file(busybox, "/bin/busybox", stat.S_IFREG | 0o755)
    for applet in ("sh", "mount", "mkdir", "cat", "cut", "poweroff", "sync", "ls", "echo"):
        entries[f"bin/{applet}"] = Entry(f"bin/{applet}", stat.S_IFLNK | 0o777, data=b"busybox")
    # the interpreter, its extension modules and their libraries
    add_file(exe)
    dyn = sorted(p for p in dynload.iterdir()
                 if p.suffix == ".so" and not DYNLOAD_SKIP.match(p.name))
    for p in dyn:
        add_file(p)
    # the package's run-time dependencies: psutil (each worker counts its own process tree)
    # and numpy (the ring), each with its auditwheel library directory (numpy.libs)
    pkg_so: list[Path] = []
    pkg_roots: list[Path] = []
    for pkg in GUEST_PACKAGES:
        for root in package_dirs(pkg):
            pkg_roots.append(root)
            for src in sorted(root.rglob("*")):
                rel = src.relative_to(root)
                if ("__pycache__" in rel.parts or PACKAGE_SKIP_DIRS & set(rel.parts[:-1])
                        or not src.is_file()):
                    continue
                name = f"{GUEST_DIR}/{root.name}/{rel}"
                if src.suffix == ".py":
                    add_py(src, name)
                elif ".so" in src.suffixes and not PACKAGE_SKIP_SO.match(src.name):
                    add_file(src, name)
                    pkg_so.append(src)
    for lib in ldd([exe, *dyn, *pkg_so]):
        real = Path(os.path.realpath(lib))
        if any(real.is_relative_to(r) for r in pkg_roots):
            continue  # a package's own library (numpy.libs): copied above, found by rpath
        add_file(real)
        name = os.path.normpath(lib)  # ldd may say numpy/_core/../../numpy.libs/...
        if name != str(real):  # keep the name ldd resolved (a symlink on the host)
            entries[name.lstrip("/")] = Entry(name, stat.S_IFLNK | 0o777,
                                              data=str(real).encode())
    # the stdlib, trimmed
    for root, dirs, files in os.walk(stdlib):
        rel = Path(root).relative_to(stdlib)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d != dynload.name
                         and not (d in STDLIB_SKIP_DIRS or d.startswith(STDLIB_SKIP_PREFIXES)))
        if rel.parts and rel.parts[0] == "lib-dynload":
            continue
        for f in sorted(files):
            if f.endswith(".py"):
                add_py(Path(root) / f, str(Path(root) / f))
    # the code under test and the guest scripts
    for src in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in src.parts:
            add_py(src, f"{GUEST_DIR}/pytest_perfgate/{src.relative_to(PACKAGE)}")
    for name in GUEST_FILES:
        add_py(HERE / name, f"{GUEST_DIR}/{name}")
    init = INIT_SCRIPT.replace("@PYTHON@", str(exe)).encode()
    entries["init"] = Entry("init", stat.S_IFREG | 0o755, data=init)
    entries["dev/console"] = Entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1))
    for d in ("proc", "sys", "tmp", "run", "root"):
        entries[d] = Entry(d, stat.S_IFDIR | 0o755)
    # parent directories of everything
    for name in list(entries):
        parent = Path(name).parent
        while str(parent) not in (".", "/"):
            entries.setdefault(str(parent), Entry(str(parent), stat.S_IFDIR | 0o755))
            parent = parent.parent
    ordered = sorted(entries.values(), key=lambda e: (e.name.count("/"), e.name)
                     if stat.S_ISDIR(e.mode) else (10_000, e.name))
    return ordered, exe


def inputs_hash(entries: list[Entry]) -> str:
    h = hashlib.sha256(FORMAT_VERSION.encode())
    h.update(Path(__file__).read_bytes())
    for e in entries:
        h.update(e.key().encode() + b"\0")
        if e.src is not None and e.src.is_relative_to(REPO):  # the code under test: content
            h.update(e.src.read_bytes())
    return h.hexdigest()[:16]


# ---- cpio newc writer -------------------------------------------------------------------

def _header(ino: int, e: Entry, size: int) -> bytes:
    name = e.name.encode() + b"\0"
    fields = (ino, e.mode, 0, 0, 2 if stat.S_ISDIR(e.mode) else 1, e.mtime, size, 0, 0,
              e.rdev[0], e.rdev[1], len(name), 0)
    head = b"070701" + b"".join(b"%08X" % f for f in fields) + name
    return head + b"\0" * (-len(head) % 4)


def write_cpio(entries: list[Entry], out: io.BufferedIOBase) -> None:
    for ino, e in enumerate(entries, start=1):
        data = e.data
        if e.src is not None and stat.S_ISREG(e.mode):
            data = e.src.read_bytes()
        if not (stat.S_ISREG(e.mode) or stat.S_ISLNK(e.mode)):
            data = b""
        out.write(_header(ino, e, len(data)))
        out.write(data + b"\0" * (-len(data) % 4))
    out.write(_header(0, Entry("TRAILER!!!", 0), 0))


def default_cache_dir() -> Path:
    env = os.environ.get("PERFGATE_QEMU_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-perfgate" / "qemu"


def build(cache_dir: Path | None = None, keep: int = 3) -> tuple[Path, bool]:
    """(path of the cached initramfs, whether it was built now). Raises Missing."""
    entries, _exe = collect()
    cache_dir = Path(cache_dir or default_cache_dir())
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"initramfs-{inputs_hash(entries)}.cpio.gz"
    if target.is_file():
        return target, False
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".initramfs-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                       compresslevel=6, mtime=0) as gz:
            write_cpio(entries, gz)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # keep the newest few images, drop older ones (each is ~20 MB)
    old = sorted(cache_dir.glob("initramfs-*.cpio.gz"), key=lambda p: p.stat().st_mtime,
                 reverse=True)
    for p in old[keep:]:
        p.unlink(missing_ok=True)
    return target, True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args()
    t = time.monotonic()
    try:
        path, built = build(args.cache_dir)
    except Missing as exc:
        print(f"missing: {exc}", file=sys.stderr)
        return 2
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB, "
          f"{'built' if built else 'cached'} in {time.monotonic() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
