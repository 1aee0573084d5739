"""DeepGEMM's ``deep_gemm.testing`` on dgx: ``bench`` (timing), ``numeric`` (accuracy), ``utils`` (test decorators),
their names also here."""

from . import bench, numeric, utils
from .bench import *  # noqa: F403 - DeepGEMM's testing re-exports its three modules' names
from .bench import __all__ as _bench_names
from .numeric import *  # noqa: F403
from .numeric import __all__ as _numeric_names
from .utils import *  # noqa: F403
from .utils import __all__ as _utils_names

__all__ = [*_bench_names, *_numeric_names, *_utils_names]
