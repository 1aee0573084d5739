"""dgx.fp8_gemm_nt: D = A . B^T with 1x128 (A) and 128x128 (B) FP32 scales, BF16 output."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NamedTuple

from . import jit, runtime
from .checks import (
    ceil_div,
    expect_contiguous,
    expect_dtype,
    expect_fp8_operands,
    expect_nonnegative_strides,
    expect_shape,
    expect_tma_rows,
    unpack_pair,
    views_on_one_device,
)
from . import device as device_module
from .device import get_num_sms
from .heuristics import choose_dense
from .kernels.fp8_gemm import LAYOUT_DENSE, GemmConfig
from .layout import SfaTma, get_mn_major_tma_aligned_tensor, sfa_tma_layout
from .runtime import Swizzle
from .streams import resolve_stream
from .tensors import TensorView, as_view


@dataclass(frozen=True)
class DensePlan:
    """A compiled, loaded kernel and its launch shape for one (M, N, K, device, SM count)."""

    config: GemmConfig
    launcher: runtime.Launcher


_plans: dict[tuple[int, int, int, int, int], DensePlan] = {}
_params: dict[tuple, runtime.ParamPack] = {}
_PARAM_CACHE_LIMIT = 512


def launch_plan(config: GemmConfig, units: int, device: int, num_sms: int) -> DensePlan:
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
    return DensePlan(config, runtime.Launcher(kernel, shape))


def _plan(m: int, n: int, k: int, device: int, num_sms: int, config: GemmConfig | None = None) -> DensePlan:
    key = (m, n, k, device, num_sms, config)
    plan = _plans.get(key)
    if plan is None:
        if config is None:
            config = choose_dense(m, n, k, num_sms).config
        elif (config.n, config.k, config.layout) != (n, k, LAYOUT_DENSE):
            raise ValueError(f"config is for a {config.layout} GEMM with N={config.n}, K={config.k}; the inputs "
                             f"are dense with N={n}, K={k}")
        plan = launch_plan(config, config.units(m), device, num_sms)
        _plans[key] = plan
    return plan


class Operands(NamedTuple):
    """Addresses and 2-D extents of everything a GEMM kernel reads and writes (the tensor maps' input).
    A tuple, so that building one and looking it up per call stays cheap.

    A and D are seen as [rows, K] / [rows, N], B as [groups * N, K]; SFA as `sfa.kb` rows of `sfa.m`
    floats (M-major). Leading dimensions are in elements."""

    a: int
    a_rows: int
    lda: int
    b: int
    b_rows: int
    ldb: int
    d: int
    d_rows: int
    ldd: int
    sfa: int
    sfa_map: SfaTma
    sfb: int
    m: int  # the kernel's m: rows (masked, K-grouped: rows per group)
    grouped_layout: int = 0
    groups: int = 1
    sfb_map: SfaTma | None = None  # weight gradient: the per-row B scales (N-major), like SFA
    k: int = 0  # K extent of the A and B maps when it is not the config's
    group_maps: int = 0  # K-grouped: device address of the groups' maps of A and B
    accumulate: bool = False  # weight gradient: D holds C and the kernel adds to it (else D is overwritten)


def pack_params(config: GemmConfig, ops: Operands) -> runtime.ParamPack:
    """The kernel's parameters for `ops`, encoded once per distinct (config, operands) and reused."""
    key = (config, ops)
    pack = _params.get(key)
    if pack is None:
        n, k = config.n, ops.k or config.k
        tmap_a = runtime.encode_tensor_map_2d("uint8", ops.a, k, ops.a_rows, ops.lda, 128, config.box_rows_a, Swizzle.B128)
        tmap_b = runtime.encode_tensor_map_2d("uint8", ops.b, k, ops.b_rows, ops.ldb, 128, config.box_rows_b, Swizzle.B128)
        span = config.d_span
        wg_rows = config.block_m // config.math_warpgroups
        sfa = ops.sfa_map
        tmap_sfa = runtime.encode_tensor_map_2d("float32", ops.sfa, sfa.m, sfa.kb, sfa.row_stride, config.block_m, 1)
        if config.wgrad:  # FP32 D (TMA reduce-add or store); B's scales get a map like A's
            sfb = ops.sfb_map
            tmap_sfb = runtime.encode_tensor_map_2d("float32", ops.sfb, sfb.m, sfb.kb, sfb.row_stride, config.block_n, 1)
            tmap_d = runtime.encode_tensor_map_2d(
                "float32", ops.d, n, ops.d_rows, ops.ldd * 4, span // 4, wg_rows, Swizzle(span if span > 16 else 0)
            )
        else:
            tmap_d = runtime.encode_tensor_map_2d(
                "bfloat16", ops.d, n, ops.d_rows, ops.ldd * 2, span // 2, wg_rows, Swizzle(span if span > 16 else 0)
            )
            if config.b_scales_in_stage:  # one row of floats from the 16-byte boundary at or below SFB, boxes of 4
                if ops.sfb % 4:
                    raise ValueError(f"SFB: expected a float32 address (4-byte aligned); got 0x{ops.sfb:x}")
                lead = ops.sfb % 16
                count = ops.groups * ceil_div(n, 128) * ceil_div(k, 128) + lead // 4
                # (cuTensorMapEncodeTiled refuses rank 1 as called here, so a map of one row.)
                row_bytes = ceil_div(count * 4, 16) * 16
                tmap_sfb = runtime.encode_tensor_map_2d("float32", ops.sfb - lead, count, 1, row_bytes, 4, 1)
            else:
                tmap_sfb = tmap_sfa  # unused
        pack = runtime.ParamPack(
            [tmap_a, tmap_b, tmap_d, tmap_sfa, tmap_sfb, ("u64", ops.sfb), ("u64", ops.sfa), ("i32", sfa.m),
             ("i32", sfa.row_stride // 4), ("i32", ops.m), ("u64", ops.grouped_layout),
             ("i32", ops.groups), ("u64", ops.d), ("u64", ops.ldd), ("i32", int(ops.accumulate)),
             ("u64", ops.group_maps)]
        )
        if len(_params) >= _PARAM_CACHE_LIMIT:
            _params.clear()
        _params[key] = pack
    return pack


def sfa_for_tma(SFA, sfav: TensorView, stream, device: int, name: str = "SFA"):
    """(view, its TMA layout, a converted copy to keep alive or None, the launch stream if resolved) of
    per-row scales (SFA, or the weight gradient's SFB)."""
    sfa_tma = sfa_tma_layout(sfav)
    if sfa_tma is not None:
        return sfav, sfa_tma, None, None
    keep, launch_stream = _converted_sfa(SFA, stream, device, name)
    sfav = as_view(keep, name)
    return sfav, sfa_tma_layout(sfav), keep, launch_stream


# Per-call fast path for torch tensors: (data pointer, shape, strides, dtype, device) of the five tensors
# -> the launcher and packed parameters the full path built for them. Nothing is skipped that could
# differ: the key holds everything the checks, the plan and the tensor maps depend on.
_fast: dict[tuple, tuple[runtime.Launcher, runtime.ParamPack, int]] = {}
_FAST_CACHE_LIMIT = 4096


def _torch_key(a, b, d) -> tuple | None:
    torch = sys.modules.get("torch")
    if torch is None or type(a) is not tuple or type(b) is not tuple or len(a) != 2 or len(b) != 2:
        return None
    tensor = torch.Tensor
    key = [device_module.generation]
    for t in (a[0], a[1], b[0], b[1], d):
        if type(t) is not tensor:
            return None
        key += (t.data_ptr(), t.shape, t.stride(), t.dtype, t.get_device())
    return tuple(key)


def fp8_gemm_nt(a, b, d, c=None, *, stream=None, config: GemmConfig | None = None) -> None:
    """D = A . B^T for FP8 A [M, K] and B [N, K] with DeepSeek-V3 fine-grained scales; BF16 D [M, N]
    (or, for a float32 D, the weight gradient D = C + A . B^T with both operands scaled per row).

    Args:
        a: (A, SFA): A float8_e4m3fn [M, K], K-contiguous; SFA float32 [M, ceil(K/128)], one scale per
           row per 128 of K. The TMA-aligned M-major layout (get_mn_major_tma_aligned_tensor, made by
           dgx.per_token_cast_to_fp8) is read as it is; a torch SFA in any other layout (e.g. row-major)
           is first copied into it on the GPU (one extra copy kernel); other tensor types raise
           ValueError.
        b: (B, SFB): B float8_e4m3fn [N, K], K-contiguous; SFB float32 [ceil(N/128), ceil(K/128)], one
           scale per 128x128 block, contiguous.
        d: bfloat16 [M, N], rows contiguous and 16-byte aligned; written in place.
        c: with a float32 d only: d = c + a.b^T (c may be d itself, to accumulate). A float32 d selects
           the weight-gradient variant (dgx.wgrad): B scaled per row too, SFB float32 [N, ceil(K/128)].
        stream: the stream to launch on (default: torch's current stream).
        config: a GemmConfig to use instead of the heuristic's choice (tuning and tests).

    Raises TypeError/ValueError naming the violated constraint before anything is launched.
    """
    fast_key = _torch_key(a, b, d) if c is None and config is None else None
    if fast_key is not None:
        hit = _fast.get(fast_key)
        if hit is not None:
            launcher, pack, device = hit
            launcher.launch(resolve_stream(stream, device), pack)
            return
    A, SFA = unpack_pair(a, "a")
    B, SFB = unpack_pair(b, "b")
    av, sfav, bv, sfbv, dv = views_on_one_device(((A, "A"), (SFA, "SFA"), (B, "B"), (SFB, "SFB"), (d, "d")))
    if dv.dtype == "float32":
        from . import wgrad

        return wgrad.dense_fp32(SFA, SFB, c, (av, sfav, bv, sfbv, dv), stream=stream, config=config)
    if c is not None:
        raise ValueError("fp8_gemm_nt: c (d = c + a.b^T) needs a float32 d (the weight-gradient variant); got a "
                         f"{dv.dtype} d")
    m, n, k = expect_fp8_operands(av, sfav, bv, sfbv, dv)
    expect_dtype(dv, "d", "bfloat16")
    expect_shape(dv, "d", (m, n))
    expect_shape(sfav, "SFA", (m, ceil_div(k, 128)))
    expect_shape(sfbv, "SFB", (ceil_div(n, 128), ceil_div(k, 128)))
    if n % 8:
        raise ValueError(f"d: N must be a multiple of 8 (16-byte rows of BF16 for TMA); got N = {n}")
    if n == 0:
        return
    expect_tma_rows(av, "A")
    expect_tma_rows(bv, "B")
    expect_tma_rows(dv, "d")
    expect_nonnegative_strides(sfav, "SFA")
    expect_contiguous(sfbv, "SFB")
    if m == 0:
        return
    if m >= 2**31:
        raise ValueError(f"A: M must be below 2**31; got {m}")
    device = av.device
    sfav, sfa_tma, keep, launch_stream = sfa_for_tma(SFA, sfav, stream, device)
    plan = _plan(m, n, k, device, get_num_sms(device), config)
    if launch_stream is None:
        launch_stream = resolve_stream(stream, device)
    ops = Operands(av.ptr, m, av.strides[0], bv.ptr, n, bv.strides[0], dv.ptr, m, dv.strides[0], sfav.ptr, sfa_tma,
                   sfbv.ptr, m)
    pack = pack_params(plan.config, ops)
    plan.launcher.launch(launch_stream, pack)
    if fast_key is not None and keep is None:
        if len(_fast) >= _FAST_CACHE_LIMIT:
            _fast.clear()
        _fast[fast_key] = (plan.launcher, pack, device)
    del keep  # the copy was made on the launch stream, so the allocator reuses it only after the kernel


def _converted_sfa(sfa, stream, device: int, name: str = "SFA"):
    """SFA copied into the TMA-aligned M-major layout on the GPU, on the launch stream; and that stream."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(sfa, torch.Tensor):
        raise ValueError(
            f"{name}: expected the TMA-aligned MN-major layout (strides (1, S) with S >= rows and S * 4 a "
            "multiple of 16 bytes, base address 16-byte aligned; see get_mn_major_tma_aligned_tensor); other "
            f"layouts are converted only for torch tensors, and this is a {type(sfa).__name__}"
        )
    launch_stream = resolve_stream(stream, device)

    def convert():
        out = get_mn_major_tma_aligned_tensor(sfa)
        if out is sfa:  # already MN-major but its base address is not 16-byte aligned
            out = get_mn_major_tma_aligned_tensor(sfa.contiguous())
        return out

    if launch_stream == torch.cuda.current_stream(sfa.device).cuda_stream:
        return convert(), launch_stream  # torch's own stream: its allocator orders the reuse of the copy
    # Another stream: copy there, and tell the allocator the copy is in use on it.
    external = torch.cuda.ExternalStream(launch_stream, device=sfa.device)
    with torch.cuda.stream(external):
        out = convert()
    out.record_stream(external)
    return out, launch_stream


def gemm_fp8_fp8_bf16_nt(lhs, rhs, out) -> None:
    """Legacy name of fp8_gemm_nt(lhs, rhs, out)."""
    fp8_gemm_nt(lhs, rhs, out)
