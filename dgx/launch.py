"""The launch layer under every GEMM entry point: check -> plan -> launch.

One plan cache (a config chosen by the kind's heuristic in dgx/families, or given; its kernel compiled and
loaded, its persistent grid sized) for the GEMM kinds (the prefix-sum layout sizes its grid for the rows of A and
keeps its plans in dgx.grouped_psum), one cache of packed kernel parameters, and the per-row scales brought into
the layout TMA reads. The entry points (dgx.gemm, dgx.grouped, dgx.grouped_psum, dgx.wgrad) check their inputs,
then call :func:`plan`, :func:`pack` and the plan's launcher (dgx.gemm hands a float32 output to dgx.wgrad's
dense weight gradient, which shares its arguments).
"""

from __future__ import annotations

import math

import sys
from dataclasses import dataclass

from . import families, jit, runtime
from . import scales as scales_module
from .device import get_num_sms
from .heuristics import CONTIGUOUS_ALIGNMENT, choose_fused
from .kernels.fp8_epilogue import Epilogue
from .kernels.fp8_gemm import GemmConfig
from .kernels.fp8_gemm_args import Operands, pack_operands
from .kinds import GemmKind
from .layout import sfa_tma_layout
from .streams import resolve_stream
from .tensors import TensorView
from . import caches

__all__ = ["GemmPlan", "Operands", "launch_plan", "pack", "plan", "release", "scales_for_tma"]


@dataclass(frozen=True)
class GemmPlan:
    """A compiled, loaded kernel and its launch shape for one problem (kind, shape, device, SM count)."""

    config: GemmConfig
    launcher: runtime.Launcher


_plans: dict[tuple, GemmPlan] = caches.per_process({})
_params: dict[tuple, runtime.ParamPack] = caches.per_process({})
_PARAM_CACHE_LIMIT = 512


def launch_plan(config: GemmConfig, units: int, device: int, num_sms: int) -> GemmPlan:
    """Compiles/loads `config`'s kernel and sizes its persistent grid for at most `units` work units."""
    kernel = jit.get_kernel(config.render(), device)
    grid = config.grid(units, num_sms)
    shape = runtime.LaunchShape((grid, 1, 1), (config.threads, 1, 1), (config.cluster, 1, 1), config.smem_bytes)
    if config.cluster > 1:
        resident = runtime.max_active_clusters(kernel, shape)
        if resident < 1:
            raise RuntimeError(f"no cluster of {config.cluster} CTAs of {config.kernel_name} fits on device {device}")
        if grid // config.cluster > resident:
            grid = resident * config.cluster
            shape = runtime.LaunchShape(
                (grid, 1, 1), (config.threads, 1, 1), (config.cluster, 1, 1), config.smem_bytes
            )
    return GemmPlan(config, runtime.Launcher(kernel, shape))


def plan(kind: GemmKind, m: int, n: int, k: int, device: int, config: GemmConfig | None = None, *,
         groups: int = 1, units_m: int | None = None, epilogue: Epilogue | None = None) -> GemmPlan:
    """The plan for a `kind` GEMM of M rows (the heuristic's M: masked, the expected rows per group;
    K-grouped, a typical group's K), N, K and `groups`, on `device`; made once per distinct problem.

    ``units_m`` (M-grouped) is the M the grid is sized for when it is not `m`: every row of the contiguous
    layout, the M_max of each masked group. `config` replaces the heuristic's choice; one that does not
    fit the problem raises ValueError. `epilogue`: a fused epilogue (dgx.fused), chosen for by
    heuristics.choose_fused; a given config must carry the same.
    """
    num_sms = get_num_sms(device)
    key = (kind, m, units_m, n, k, groups, device, num_sms, config, epilogue)
    found = _plans.get(key)
    if found is None:
        if config is None and epilogue is not None:
            config = choose_fused(kind.value, m, n, k, groups, num_sms, epilogue).config
        elif config is None:
            config = families.kind(kind.value).choose(m, n, k, groups, num_sms).config
        else:
            _expect_config_fits(kind, config, n, k)
            if config.epilogue != epilogue:
                raise ValueError(f"config: its epilogue {config.epilogue} is not the call's {epilogue}")
        units = config.units(m if units_m is None else units_m)
        if kind in (GemmKind.M_GROUPED_MASKED, GemmKind.WGRAD, GemmKind.K_GROUPED):
            units *= groups  # masked: every block of every group; K-grouped: one output per group
        found = launch_plan(config, units, device, num_sms)
        _plans[key] = found
    return found


def _expect_config_fits(kind: GemmKind, config: GemmConfig, n: int, k: int) -> None:
    """A config given for a `kind` GEMM with N = n (and K = k unless K-grouped) must be one of its kernels."""
    fits = (
        config.layout == kind.layout
        and config.n == n
        and (kind == GemmKind.K_GROUPED or config.k == k)
        and config.wgrad == kind.wgrad  # a weight-gradient kernel writes FP32: never into a BF16 output
    )
    if kind in (GemmKind.M_GROUPED_CONTIGUOUS, GemmKind.M_GROUPED_MASKED) and CONTIGUOUS_ALIGNMENT % config.block_m:
        fits = False
    if not fits:
        raise ValueError(
            f"config is for a {config.kind} GEMM with N={config.n}, K={config.k} (block_m {config.block_m}); "
            f"it does not fit a {kind} GEMM with N={n}, K={k}"
        )


def pack(config: GemmConfig, ops: Operands) -> runtime.ParamPack:
    """The kernel's parameters for `ops`, encoded once per distinct (config, operands) and reused."""
    # alpha's sign bit too: -0.0 == 0.0 (and hashes alike) but writes -0 for +0 into the FP8 output
    key = (config, ops, math.copysign(1.0, ops.alpha))
    packed = _params.get(key)
    if packed is None:
        packed = pack_operands(config, ops)
        if len(_params) >= _PARAM_CACHE_LIMIT:
            _params.clear()
        _params[key] = packed
    return packed


def scales_for_tma(scales, view: TensorView, stream, device: int, name: str = "SFA", transposed: bool = False):
    """(view, its TMA layout, the conversion made or None, the launch stream if resolved) of per-row scales (SFA,
    or the weight gradient's SFB). Scales the kernels cannot read as they are (a row-major SFA, say) are copied
    into the TMA-aligned M-major layout on the GPU by dgx's scale-layout kernel, on the launch stream, into memory
    dgx owns (dgx.scales); the caller calls ``release()`` on the conversion once the GEMM is queued. Only torch
    tensors are converted. `transposed`: `view` is the transpose of `scales` (the K-grouped GEMM's scales in
    DeepGEMM's layout), which the conversion reads through."""
    layout = sfa_tma_layout(view)
    if layout is not None:
        return view, layout, None, None
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(scales, torch.Tensor):
        wanted = (
            "DeepGEMM's layout with TMA-aligned rows (strides (S, 1) with S >= columns and S * 4 a multiple of "
            "16 bytes"
            if transposed  # the K-grouped scales in DeepGEMM's layout: the transpose of the MN-major one
            else "the TMA-aligned MN-major layout (strides (1, S) with S >= rows and S * 4 a multiple of 16 bytes"
        )
        raise ValueError(
            f"{name}: expected {wanted}, base address 16-byte aligned; see get_mn_major_tma_aligned_tensor); "
            f"other layouts are converted only for torch tensors, and this is a {type(scales).__name__}"
        )
    launch_stream = resolve_stream(stream, device)
    converted, conversion = scales_module.convert(view, launch_stream, name, name)
    return converted, sfa_tma_layout(converted), conversion, launch_stream


def release(*conversions) -> None:
    """Releases the conversions of :func:`scales_for_tma` (None allowed) once the GEMM reading them is queued."""
    for conversion in conversions:
        if conversion is not None:
            conversion.release()
