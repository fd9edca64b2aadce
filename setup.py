"""The one compiled part: ring/_stream.c, optional (a failed build leaves the plain copy)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pytest_perfgate.ring._stream", ["pytest_perfgate/ring/_stream.c"],
                             optional=True)])
