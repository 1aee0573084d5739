"""DeepGEMM's ``deep_gemm.utils`` on dgx: ``math`` (quantisation helpers, UE8M0), ``layout`` (scale layouts, the
contiguous layout's alignment) and ``dist`` (torch.distributed helpers), their names also here."""

from . import dist, layout, math
from .dist import init_dist, uneven_all_gather
from .layout import *  # noqa: F403 - DeepGEMM's utils re-exports both modules' names
from .layout import __all__ as _layout_names
from .math import *  # noqa: F403
from .math import __all__ as _math_names

__all__ = [*_math_names, *_layout_names, "init_dist", "uneven_all_gather"]
