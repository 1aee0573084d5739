"""dgx's BF16 einsums: the three contractions DeepGEMM's ``einsum`` runs on sm_90, with its semantics.

- ``einsum('bmk,bnk->mn', a, b, d, c=None)``: a [S, M, K], b [S, N, K] BF16; d [M, N] FP32 (d = c + the sum over s
  of a[s] . b[s]^T; c FP32 [M, N], may be d itself to accumulate) or BF16 (no c). One output whose reduction runs
  over (s, k): its ranges run on their own CTAs and a second kernel sums their FP32 partials in order, so two runs
  give the same bits.
- ``einsum('bhr,hdr->bhd', x, y, z)``: z[b, h, :] = y[h] . x[b, h, :] (x [b, h, r], y [h, d, r], z [b, h, d]) and
  ``einsum('bhd,hdr->bhr', x, y, z)``: z[b, h, :] = x[b, h, :] . y[h] (x [b, h, d], y [h, d, r], z [b, h, r]), all
  BF16, FP32 accumulation: one launch over every head, each a GEMM over strided views (any 16-byte-multiple
  strides, e.g. y a slice [:, :, :r] of a wider tensor): no copies.

Every input is checked before anything is queued (TypeError / ValueError naming the argument). Launches go on the
caller's stream (torch's current stream by default), PDL included (dgx.set_pdl), capturable in CUDA graphs.
"""

from __future__ import annotations

from _thread import get_ident

from . import device as device_module
from . import bf16, env, fastpath, launch, runtime, scales
from .bf16_checks import expect_below_limit
from .bf16_prepare import copy_into, zero_rows
from .checks import views_on_one_device
from .device import get_num_sms
from .einsum_checks import (
    MAX_BATCH_KBLOCKS,
    expect_expr,
    expect_no_overlap,
    expect_out_2d,
    strided_3d,
)
from .intmath import ceil_div
from .kernels.bf16_gemm import INTERFACE as GEMM_INTERFACE
from .kernels.bf16_gemm_args import Bf16Operands
from .kernels.bf16_gemm_config import BLOCK_K, Bf16GemmConfig
from .kernels.einsum import (
    BMK_BNK_MN,
    BatchSumReduceConfig,
    batch_sum_ranges,
    batch_sum_tiles,
    choose_batch_sum,
    choose_batched,
    pack_reduce,
    REDUCE_INTERFACE,
)
from .streams import resolve_stream
from .tensors import TensorView
from . import caches

__all__ = ["einsum"]  # (check: the checks alone, for the torch path)

_PARAM_CACHE_LIMIT = 512
_batched_plans: dict[tuple, launch.GemmPlan] = caches.per_process({})
_sum_plans: dict[tuple, "_SumPlan"] = caches.per_process({})
#: The workspace slot of the partials (dgx.scales.buffer: per device, stream and thread; graph-owned under capture).
WORKSPACE_SLOT = "einsum_partials"
# Per-call fast path for torch tensors (dgx.fastpath): hint key (:func:`_fast_key`) -> the entry an earlier call of
# that structure made (a fastpath.Entry over (a, b, d) for the per-head forms, a _SumEntry over (a, b, d[, c]) for
# 'bmk,bnk->mn').
_fast: dict[tuple, object] = caches.per_process({})
_pingpong = env.raw_reader("DGX_BF16_PINGPONG")  # in the key: the heuristic's choice follows it


def einsum(expr: str, a, b, d, c=None, *, stream=None, config: Bf16GemmConfig | None = None) -> None:
    """DeepGEMM's BF16 einsum on sm_90: d = contraction of a and b (see the module docstring for each `expr`).

    Args:
        expr: 'bmk,bnk->mn', 'bhr,hdr->bhd' or 'bhd,hdr->bhr' (spaces ignored).
        a, b: BF16 operands, 3-D, last dimension contiguous, other strides multiples of 16 bytes, bases 16-byte
            aligned (for the per-head forms, a is x and b is y, which may be a strided view).
        d: the output, written: 'bmk,bnk->mn' FP32 or BF16 [M, N] with contiguous rows; else BF16 [b, h, N] with
            its last dimension contiguous. N a multiple of 8. It may not overlap a or b.
        c: 'bmk,bnk->mn' with an FP32 d only: added (d = c + ...); c may be d itself, another tensor is first
            copied into d. Must be None for the per-head forms.
        stream: the stream to launch on (default: torch's current stream).
        config: a Bf16GemmConfig to run instead of the heuristic's choice (its layout must fit `expr`).

    An empty output does nothing; S = 0 sets d to c (or zeros); K = 0 of a per-head form zeroes z.
    """
    key = None
    if config is None and type(expr) is str:
        try:
            key = (expr, a.shape, b.shape, c is None, c is d, _pingpong(), get_ident())
        except AttributeError:  # not tensors: the full path says so
            key = None
        else:
            entry = _fast.get(key)
            if entry is not None:
                if c is None or c is d:
                    if entry.check(a, b, d) and entry.run((a.data_ptr(), b.data_ptr(), d.data_ptr()), stream):
                        return
                elif entry.check(a, b, d, c) and entry.run((a.data_ptr(), b.data_ptr(), d.data_ptr(), c.data_ptr()),
                                                           stream):
                    return
    made = _einsum(expr, a, b, d, c, stream, config, run=True)
    if made is not None and key is not None:
        tensors = (a, b, d) if c is None or c is d else (a, b, d, c)
        if fastpath.torch_tensors(*tensors):
            made(key, tensors)


def check(expr: str, a, b, d, c=None) -> None:
    """The checks of :func:`einsum`, nothing queued (for the same contraction run another way, e.g. by torch)."""
    _einsum(expr, a, b, d, c, None, None, run=False)


def _einsum(expr, a, b, d, c, stream, config, run: bool):
    """The checks and (with `run`) the launches; a function ``(key, tensors)`` that remembers them for the fast path,
    or None where nothing was launched."""
    expr = expect_expr(expr)
    av, bv, dv = views_on_one_device(((a, "a"), (b, "b"), (d, "d")))
    if expr == BMK_BNK_MN:
        return _batch_sum(av, bv, dv, c, stream, config, run)
    if c is not None:
        raise ValueError(f"c: {expr!r} adds no c (DeepGEMM's einsum takes c for 'bmk,bnk->mn' only); got a "
                         f"{type(c).__name__}")
    return _batched(expr, av, bv, dv, stream, config, run)


def _launch(config, ops: Bf16Operands, launcher: runtime.Launcher, stream: int) -> runtime.ParamPack:
    packed = bf16.pack(config, ops)
    launcher.launch(stream, packed)
    return packed


def _expect_config(config: Bf16GemmConfig, wanted: Bf16GemmConfig, expr: str) -> None:
    """A caller's config fits the problem where the heuristic's does: layout, majors, N, K and output."""
    if not isinstance(config, Bf16GemmConfig):
        raise TypeError(f"config: expected a Bf16GemmConfig; got {type(config).__name__}")
    names = ("layout", "n", "k", "major_a", "major_b", "out_dtype", "with_c")
    wrong = [f"{name} {getattr(config, name)!r} (needs {getattr(wanted, name)!r})" for name in names
             if getattr(config, name) != getattr(wanted, name)]
    if wrong:
        raise ValueError(f"config: {config.kernel_name} does not fit this {expr!r} einsum: {', '.join(wrong)}")


# --- 'bhr,hdr->bhd' and 'bhd,hdr->bhr' ----------------------------------------------------------------------------


def _batched(expr: str, xv: TensorView, yv: TensorView, zv: TensorView, stream, config, run: bool) -> None:
    x = strided_3d(xv, "a")
    y = strided_3d(yv, "b")
    batch, heads, k = xv.shape
    if yv.shape[0] != heads:
        raise ValueError(f"b: expected {heads} heads (dim 0) like a's dim 1; got shape {yv.shape}")
    if expr == "bhr,hdr->bhd":  # y [h, d, r]: N = d, K = r (K-major)
        n = yv.shape[1]
        if yv.shape[2] != k:
            raise ValueError(f"b: expected r = {k} (dim 2) like a's dim 2; got shape {yv.shape}")
    else:  # 'bhd,hdr->bhr': y [h, d, r]: K = d, N = r (N-major)
        n = yv.shape[2]
        if yv.shape[1] != k:
            raise ValueError(f"b: expected d = {k} (dim 1) like a's dim 2; got shape {yv.shape}")
    if tuple(zv.shape) != (batch, heads, n):
        raise ValueError(f"d: expected shape {(batch, heads, n)}; got {tuple(zv.shape)}")
    if n % 8:
        raise ValueError(f"d: its last dimension N must be a multiple of 8 (16-byte rows for TMA); got N = {n}")
    z = strided_3d(zv, "d")
    for value, name, what in ((batch, "a", "b"), (heads, "a", "h"), (k, "a", "K"), (n, "d", "N")):
        expect_below_limit(value, name, what)
    expect_no_overlap(zv, "d", [(xv, "a"), (yv, "b")])
    if config is not None and not isinstance(config, Bf16GemmConfig):
        raise TypeError(f"config: expected a Bf16GemmConfig; got {type(config).__name__}")
    if zv.numel() == 0 or not run:
        return
    device = xv.device
    launch_stream = resolve_stream(stream, device)
    if k == 0:  # no products: z = 0
        _zero_3d(zv, launch_stream)
        return
    num_sms = get_num_sms(device)
    pingpong = env.bf16_pingpong()
    key = (expr, batch, heads, n, k, device, num_sms, config, pingpong)
    plan = _batched_plans.get(key)
    if plan is None:
        chosen = choose_batched(expr, batch, heads, n, k, num_sms, pingpong)
        if config is not None:
            _expect_config(config, chosen, expr)
            chosen = config
        if len(_batched_plans) >= _PARAM_CACHE_LIMIT:  # (every b is its own plan: bound them)
            _batched_plans.clear()
        plan = _batched_plans[key] = launch.launch_plan(chosen, chosen.units(batch) * heads, device, num_sms)
    # Maps, innermost first: x (K, b, h), y (K, N, h) K-major or (N, K, h) N-major, z (N, b, h). y's two inner
    # dimensions are its [d, r] either way; only which is K differs.
    ops = Bf16Operands(a=xv.ptr, a_dims=(k, batch, heads), a_strides=(x.outer, x.middle),
                       b=yv.ptr, b_dims=(yv.shape[2], yv.shape[1], heads), b_strides=(y.middle, y.outer),
                       d=zv.ptr, d_dims=(n, batch, heads), d_strides=(z.outer, z.middle), m=batch, groups=heads)
    packed = _launch(plan.config, ops, plan.launcher, launch_stream)

    def remember(key: tuple, tensors: tuple) -> None:
        # d must not overlap a or b: re-checked on new addresses
        fastpath.register(_fast, key, tensors, plan, packed, interface=GEMM_INTERFACE, disjoint=((2, 0), (2, 1)))

    return remember


def _zero_3d(zv: TensorView, stream: int) -> None:
    """z = 0 (any strides TMA takes): one 2-D memset per index of its outermost dimension."""
    batch, heads, n = zv.shape
    drv = runtime._driver()
    handle = drv.CUstream(stream)
    for i in range(batch):
        address = zv.ptr + i * zv.strides[0] * 2
        pitch = (zv.strides[1] if heads > 1 else n) * 2
        runtime.check(drv.cuMemsetD2D16Async(address, pitch, 0, n, heads, handle), "cuMemsetD2D16Async")


# --- 'bmk,bnk->mn' ---------------------------------------------------------------------------------------------


class _SumPlan:
    """The GEMM kernel over tiles x ranges CTAs (one unit each), the reduction kernel, and their parameters'
    constants."""

    __slots__ = ("config", "gemm", "reduce", "ranges", "reduce_config")

    def __init__(self, config: Bf16GemmConfig, gemm: runtime.Launcher, reduce: runtime.Launcher, ranges: int,
                 reduce_config: BatchSumReduceConfig):
        self.config, self.gemm, self.reduce, self.ranges, self.reduce_config = (config, gemm, reduce, ranges,
                                                                                reduce_config)


def _sum_plan(m: int, n: int, k: int, s: int, out_dtype: str, with_c: bool, device: int,
              config: Bf16GemmConfig | None) -> _SumPlan:
    num_sms = get_num_sms(device)
    key = (m, n, k, s, out_dtype, with_c, device, num_sms, config)
    found = _sum_plans.get(key)
    if found is None:
        from . import jit

        chosen = choose_batch_sum(m, n, k, num_sms)
        if config is not None:
            _expect_config(config, chosen, BMK_BNK_MN)
            chosen = config
        ranges = batch_sum_ranges(chosen, m, s, num_sms)
        grid = batch_sum_tiles(chosen, m) * ranges  # exactly one unit per CTA: the scheduler derives the ranges
        kernel = jit.get_kernel(chosen.render(), device)
        gemm = runtime.Launcher(kernel, runtime.LaunchShape((grid, 1, 1), (chosen.threads, 1, 1), (1, 1, 1),
                                                            chosen.smem_bytes))
        reduce_config = BatchSumReduceConfig(out_dtype, with_c)
        reduce_kernel = jit.get_kernel(reduce_config.render(), device)
        reduce = runtime.Launcher(reduce_kernel, runtime.LaunchShape((reduce_config.grid(m, n, num_sms), 1, 1),
                                                                     (reduce_config.threads, 1, 1)))
        if len(_sum_plans) >= _PARAM_CACHE_LIMIT:  # (every S is its own plan: bound them)
            _sum_plans.clear()
        found = _sum_plans[key] = _SumPlan(chosen, gemm, reduce, ranges, reduce_config)
    return found


def _batch_sum(av: TensorView, bv: TensorView, dv: TensorView, c, stream, config, run: bool) -> None:
    a = strided_3d(av, "a")
    b = strided_3d(bv, "b")
    s, m, k = av.shape
    if bv.shape[0] != s or bv.shape[2] != k:
        raise ValueError(f"b: expected [S, N, K] with S = {s} and K = {k} like a; got shape {bv.shape}")
    n = bv.shape[1]
    ld_d = expect_out_2d(dv, (m, n), ("float32", "bfloat16"))
    cv, ld_c = None, 0
    if c is not None:
        from .tensors import as_view, require_cuda

        if dv.dtype != "float32":
            raise ValueError("c: only an FP32 d takes c (d = c + a . b summed over S); got a bfloat16 d")
        cv = as_view(c, "c")
        require_cuda(cv, "c", dv.device)
        ld_c = expect_out_2d(cv, (m, n), ("float32",), "c")
        if cv.ptr == dv.ptr and cv.strides != dv.strides:
            raise ValueError(f"c: is d's memory with other strides ({cv.strides} against {dv.strides})")
        if cv.ptr != dv.ptr:
            expect_no_overlap(dv, "d", [(cv, "c")])
    for value, name, what in ((s, "a", "S"), (m, "a", "M"), (n, "b", "N"), (k, "a", "K")):
        expect_below_limit(value, name, what)
    k_blocks = ceil_div(k, BLOCK_K)
    if s * k_blocks > MAX_BATCH_KBLOCKS:
        raise ValueError(f"a: S x K / 64 must be at most {MAX_BATCH_KBLOCKS} (the (s, k) reduction's k-blocks, "
                         f"32-bit); got S = {s}, K = {k}")
    expect_no_overlap(dv, "d", [(av, "a"), (bv, "b")])
    if config is not None and not isinstance(config, Bf16GemmConfig):
        raise TypeError(f"config: expected a Bf16GemmConfig; got {type(config).__name__}")
    if m == 0 or n == 0 or not run:
        return
    device = av.device
    launch_stream = resolve_stream(stream, device)
    if s == 0 or k == 0:  # no products: d = c, or zeros
        if cv is None:
            zero_rows(dv, 0, m, launch_stream)
        elif cv.ptr != dv.ptr:
            copy_into(dv, cv, launch_stream)
        return
    plan = _sum_plan(m, n, k, s, dv.dtype, cv is not None, device, config)
    ranges = plan.ranges
    nbytes = ranges * m * n * 4
    address, captured = scales.buffer(device, launch_stream, WORKSPACE_SLOT, nbytes)
    try:
        ops = Bf16Operands(a=av.ptr, a_dims=(k, m, s), a_strides=(a.middle, a.outer),
                           b=bv.ptr, b_dims=(k, n, s), b_strides=(b.middle, b.outer),
                           d=address, d_dims=(n, m, ranges), d_strides=(n, m * n), m=m, groups=s)
        gemm_pack = _launch(plan.config, ops, plan.gemm, launch_stream)
        reduce_pack = pack_reduce(address, dv.ptr, cv.ptr if cv is not None else 0, m, n, ranges, ld_d, ld_c)
        plan.reduce.launch(launch_stream, reduce_pack)
    finally:
        if captured:  # the graph owns the partials: freed on its stream after the reduction
            runtime.free_async(address, launch_stream)

    def remember(key: tuple, tensors: tuple) -> None:
        try:
            entry = _SumEntry(plan, tensors, address, nbytes, gemm_pack, reduce_pack)
        except Exception:  # noqa: BLE001 - the call has launched: it only goes without an entry
            return
        if entry.relocate_gemm is not None and entry.relocate_reduce is not None:
            if len(_fast) >= fastpath.CACHE_LIMIT:
                _fast.clear()
            _fast[key] = entry

    return remember


class _SumEntry:
    """The fast path of one structure of 'bmk,bnk->mn' call (dgx.fastpath's scheme, two launches): the GEMM into the
    partials and the reduction into d, each from its own copy of the parameters with the addresses relocated in; the
    partials' workspace is taken per call (dgx.scales.buffer: graph-owned under capture) and relocated when it
    moves. Tensors: (a, b, d[, c]); c is d itself when it is not among them."""

    __slots__ = ("check", "ptrs", "workspace", "nbytes", "device", "generation", "current_stream", "gemm", "reduce",
                 "gemm_words", "reduce_words", "gemm_pack", "reduce_pack", "relocate_gemm", "relocate_reduce",
                 "disjoint")

    def __init__(self, plan: "_SumPlan", tensors: tuple, workspace: int, nbytes: int, gemm_pack: runtime.ParamPack,
                 reduce_pack: runtime.ParamPack):
        import sys

        ptrs = tuple(t.data_ptr() for t in tensors)
        self.check = fastpath.make_check(tensors)
        self.ptrs, self.workspace, self.nbytes = ptrs, workspace, nbytes
        index = tensors[0].device.index
        self.device = 0 if index is None else index
        self.generation = device_module.generation
        self.current_stream = sys.modules["torch"]._C._cuda_getCurrentRawStream
        self.gemm, self.reduce = plan.gemm, plan.reduce
        self.gemm_pack = runtime.ParamPack.of_members(gemm_pack.image(), GEMM_INTERFACE.offsets)
        self.reduce_pack = runtime.ParamPack.of_members(reduce_pack.image(), REDUCE_INTERFACE.offsets)
        self.gemm_words, self.reduce_words = self.gemm_pack.words(), self.reduce_pack.words()
        # The GEMM's addresses: a, b, the partials; the reduction's: d (and c, unless c is d), the partials.
        self.relocate_gemm = self._relocator(GEMM_INTERFACE, self.gemm_words, ptrs[:2], workspace)
        self.relocate_reduce = self._relocator(REDUCE_INTERFACE, self.reduce_words, ptrs[2:], workspace)
        pairs = [(2, 0), (2, 1)] + ([(2, 3)] if len(ptrs) == 4 else [])  # d overlaps neither a, b nor another c
        self.disjoint = fastpath._disjoint(pairs, [fastpath._span(t) for t in tensors])

    @staticmethod
    def _relocator(interface, words, ptrs: tuple, workspace: int):
        addresses = ptrs + (workspace,)
        relocations = fastpath._relocations(interface, tuple(words), addresses)
        if relocations is None:
            return None
        return fastpath._relocator(relocations, [p & 15 for p in ptrs], len(addresses))

    def run(self, ptrs: tuple, stream) -> bool:
        """Launches both kernels with the tensors' addresses `ptrs`; False, having launched nothing, where this entry
        cannot serve them."""
        if self.generation != device_module.generation:
            return False
        if ptrs != self.ptrs:
            if not self.disjoint(ptrs):
                return False
            # residues first (nothing written unless both fit)
            if not (self.relocate_gemm(None, *ptrs[:2]) and self.relocate_reduce(None, *ptrs[2:])):
                return False
            self.relocate_gemm(self.gemm_words, *ptrs[:2], self.workspace)
            self.relocate_reduce(self.reduce_words, *ptrs[2:], self.workspace)
            self.ptrs = ptrs
        s = self.current_stream(self.device) if stream is None else resolve_stream(stream, self.device)
        address, captured = scales.buffer(self.device, s, WORKSPACE_SLOT, self.nbytes)
        try:
            if address != self.workspace:
                self.relocate_gemm(self.gemm_words, *ptrs[:2], address)
                self.relocate_reduce(self.reduce_words, *ptrs[2:], address)
                self.workspace = address
            self.gemm.launch(s, self.gemm_pack)
            self.reduce.launch(s, self.reduce_pack)
        finally:
            if captured:
                runtime.free_async(address, s)
        return True
