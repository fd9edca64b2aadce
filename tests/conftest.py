# numpy/scipy cannot be re-imported in one process; pytester's in-process runs drop modules
# first imported inside them, so import these once here.
import numpy  # noqa: F401
import scipy.stats  # noqa: F401

pytest_plugins = ["pytester"]
