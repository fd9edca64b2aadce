"""What a side's own environment costs an A/B run: built cold, and reused from the cache.

A scratch tree whose requirements.txt pins a package this environment lacks (a local wheel,
or with ``--package NAME==VERSION`` a real one from the index) is given its environment the
way ``start_ab`` does (pytest_perfgate/envs/build.py), ``--runs`` times with an empty cache
and ``--runs`` times with a warm one, alternated; medians in seconds.

    python tools/bench_side_env.py --runs 5
    python tools/bench_side_env.py --runs 3 --package numpy==1.26.4
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

from pytest_perfgate.envs.build import find_uv, side_env


def wheel(folder: Path, name: str, version: str) -> None:
    """A one-module pure-Python wheel (no build backend needed)."""
    files = {f"{name}/__init__.py": "COST = 1.0\n",
             f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL":
                 "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = f"{name}-{version}.dist-info/RECORD"
    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(
            b"=").decode()

    lines = [f"{p},sha256={digest(t)},{len(t.encode())}" for p, t in files.items()]
    files[record] = "\n".join([*lines, f"{record},,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for p, t in files.items():
            z.writestr(p, t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--package", default=None, help="NAME==VERSION from the index")
    args = ap.parse_args()
    import os

    work = Path(tempfile.mkdtemp(prefix="bench-side-env-"))
    try:
        tree = work / "tree"
        tree.mkdir()
        if args.package:
            pin = args.package
        else:
            wh = work / "wheels"
            wh.mkdir()
            wheel(wh, "benchpkg", "1.0")
            os.environ.update({"UV_FIND_LINKS": str(wh), "UV_NO_INDEX": "1",
                               "PIP_FIND_LINKS": str(wh), "PIP_NO_INDEX": "1"})
            pin = "benchpkg==1.0"
        (tree / "requirements.txt").write_text(pin + "\n")
        print(f"installer: {'uv ' + str(find_uv()) if find_uv() else 'pip'}; pin {pin}")
        cold, warm = [], []
        cache = work / "cache"
        for i in range(args.runs):
            shutil.rmtree(cache, ignore_errors=True)
            t0 = time.perf_counter()
            env = side_env(tree, ["requirements.txt"], cache)
            cold.append(time.perf_counter() - t0)
            assert env is not None and not env.cached, env
            t0 = time.perf_counter()
            again = side_env(tree, ["requirements.txt"], cache)
            warm.append(time.perf_counter() - t0)
            assert again is not None and again.cached, again
            print(f"turn {i + 1}: cold {cold[-1]:.2f} s, cached {warm[-1]:.2f} s", flush=True)
        print(f"median of {args.runs}: cold {statistics.median(cold):.2f} s, cached "
              f"{statistics.median(warm):.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
