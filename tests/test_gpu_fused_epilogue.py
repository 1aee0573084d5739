"""The fused epilogues of the FP8 GEMMs on the GPU (FP8 output, SwiGLU, swiglu_limit, row weights, alpha; FP32, UE8M0
and packed UE8M0 scales) on the dense, contiguous (m_indices and prefix sums) and masked layouts.

- Bitwise: with inputs whose FP32 accumulators are exact (small integers, power-of-two scales), the FP8 bytes and
  scales equal what dgx's per-token quantisation computes in torch on the same FP32 values (the SwiGLU variants
  use an approximate exp, so they are checked against float64 instead).
- Against float64 on random inputs: every FP8 output decodes within FP8 rounding of the float64 result of the same
  math, and the fused SwiGLU path is at least as accurate as the unfused one (GEMM -> BF16 -> silu * up -> quantise).
- Outputs poisoned first: every valid row written, rows past a masked group's count untouched; graph replay of the
  masked path with new counts; bitwise determinism.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import dgx  # noqa: E402
from dgx.grouped_psum import m_grouped_fp8_gemm_nt_contiguous_psum  # noqa: E402
from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402

pytestmark = pytest.mark.gpu

K = 896
INTER = 256  # SwiGLU's I: N = 2I = 512
N = 2 * INTER
LIMIT = 1.5
# The FP8 tensor cores' accumulation error, relative to a 128-channel group's amax: they keep about 13-14 bits of
# each k32 sum, and the kernel promotes to FP32 every 128 of K (a model of that truncation gives 3-4e-4 on these
# inputs; this bound is the tolerance of every float64 comparison here).
ACC_ERR = 1e-3
FORMATS = ("fp32", "ue8m0", "packed")
LAYOUTS = ("dense", "contiguous", "psum", "masked")
# (swiglu, swiglu_limit, row weights, alpha)
EPILOGUES = {
    "fp8": (False, None, False, None),
    "fp8_rw_alpha": (False, None, True, 0.75),
    "swiglu": (True, None, False, None),
    "swiglu_limit": (True, LIMIT, False, None),
    "swiglu_limit_rw_alpha": (True, LIMIT, True, 1.25),
}


# --- references ---------------------------------------------------------------------------------------

def exp2_exact(e: torch.Tensor) -> torch.Tensor:
    """2**e (integer e, normal range) as float64, exactly: built from the exponent field. torch.pow(2.0, e) and
    torch.log2 run CUDA's pow/log2 on the GPU, which may be an ulp off even at powers of two."""
    return ((e.long() + 1023) << 52).view(torch.float64)


def ceil_pow2_f64(x: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= x (positive float64), exactly (frexp: x = m * 2**e, m in [0.5, 1))."""
    m, e = torch.frexp(x)
    return exp2_exact(torch.where(m == 0.5, e - 1, e))


def ceil_pow2(x: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= x (positive normal floats), exactly."""
    bits = x.view(torch.int32)
    exp = (bits >> 23) + ((bits & 0x7FFFFF) != 0).int()
    return (exp << 23).view(torch.float32)


def quantise(h: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """FP32 h [rows, C] -> (e4m3 [rows, C], FP32 scales [rows, C/128]) as the kernel quantises: dgx's
    per_token_cast_to_fp8 for FP32 scales (h * (448 / amax)), h / scale for UE8M0 ones."""
    rows, cols = h.shape
    x = h.view(rows, cols // 128, 128)
    amax = x.abs().amax(dim=2).clamp(min=1e-4)
    sf = amax / 448.0
    if fmt == "fp32":
        q = x * (448.0 / amax).unsqueeze(2)
    else:
        sf = ceil_pow2(sf)
        q = x * (1.0 / sf).unsqueeze(2)
    return q.to(torch.float8_e4m3fn).view(rows, cols), sf


def silu_mul(acc: torch.Tensor, limit) -> torch.Tensor:
    gate, up = acc[:, :INTER], acc[:, INTER:]
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(-limit, limit)
    return gate * torch.sigmoid(gate) * up


def decode(q: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    return q.double() * sf.double().repeat_interleave(128, dim=-1)


def read_scales(sf: torch.Tensor, fmt: str, cols: int) -> torch.Tensor:
    """The output scales as FP32 [..., rows, cols/128] (packed: each byte's power of two)."""
    if fmt != "packed":
        return sf
    words = sf.contiguous()
    b = torch.stack([(words >> (8 * j)) & 0xFF for j in range(4)], dim=-1).flatten(-2)[..., : cols // 128]
    return (b.int() << 23).view(torch.float32)


# --- inputs ---------------------------------------------------------------------------------------------

def _exact_fp8(shape, g):
    return torch.randint(-4, 5, shape, device="cuda", generator=g).float().to(torch.float8_e4m3fn)


def _pow2(shape, g):
    return exp2_exact(torch.randint(-2, 3, shape, device="cuda", generator=g)).float()


def make_a(rows: int, exact: bool, g):
    if exact:
        q = _exact_fp8((rows, K), g)
        s = _pow2((rows, K // 128), g)
        return q, dgx.get_mn_major_tma_aligned_tensor(s)
    return per_token_cast_to_fp8(torch.randn(rows, K, device="cuda", generator=g))


def make_b(groups, exact: bool, g):
    """Standard gate-up weights [G, 2I, K] (rows 0..I-1 gate), with 128 x 128 scales."""
    if exact:
        return _exact_fp8((groups, N, K), g), _pow2((groups, N // 128, K // 128), g)
    qs = [per_block_cast_to_fp8(torch.randn(N, K, device="cuda", generator=g) / 8) for _ in range(groups)]
    return torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])


def alloc_out(lead: tuple[int, ...], cols: int, fmt: str):
    """A poisoned FP8 output and its scales in the M-major TMA-aligned layout (per group for masked)."""
    rows = lead[-1]
    aligned = -(-rows // 4) * 4
    d = torch.full(lead + (cols,), 0x7F, device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)  # e4m3 NaN
    if fmt == "packed":
        sf_cols, dtype, fill = -(-cols // 512), torch.int32, -1
    else:
        sf_cols, dtype, fill = cols // 128, torch.float32, float("nan")
    groups = lead[0] if len(lead) == 2 else 1
    sf = torch.full((groups, sf_cols, aligned), fill, device="cuda", dtype=dtype).transpose(1, 2)[:, :rows]
    return d, (sf if len(lead) == 2 else sf[0])


class Problem:
    """One layout's inputs: A (and its per-row group), the weights, and how to call dgx."""

    def __init__(self, layout: str, exact: bool, seed: int = 0):
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        self.layout = layout
        if layout == "dense":
            self.groups, self.rows = 1, 300
            self.row_group = torch.zeros(self.rows, dtype=torch.long)
            self.valid = torch.ones(self.rows, dtype=torch.bool)
        elif layout == "contiguous":
            self.groups, segs, fill = 3, (256, 128, 384), (200, 128, 300)
            self.rows = sum(segs)
            idx = []
            for gi, (seg, used) in enumerate(zip(segs, fill)):
                idx += [gi] * used + [-1] * (seg - used)
            self.m_indices = torch.tensor(idx, device="cuda", dtype=torch.int32)
            self.row_group = torch.tensor(idx).clamp(min=0)
            self.valid = torch.tensor(idx) >= 0
        elif layout == "psum":
            self.groups, sizes = 3, (200, 100, 300)
            starts, ends, start = [], [], 0
            for size in sizes:
                starts.append(start)
                ends.append(start + size)
                start = -(-(start + size) // 128) * 128
            self.rows = 768
            self.psum = torch.tensor(ends, device="cuda", dtype=torch.int32)
            self.row_group = torch.zeros(self.rows, dtype=torch.long)
            self.valid = torch.zeros(self.rows, dtype=torch.bool)
            for gi, (s, e) in enumerate(zip(starts, ends)):
                self.row_group[s:e] = gi
                self.valid[s:e] = True
        else:
            self.groups, self.m_max = 4, 256
            self.counts = [0, 1, 130, 256]
            self.masked_m = torch.tensor(self.counts, device="cuda", dtype=torch.int32)
            self.rows = self.groups * self.m_max
            self.row_group = torch.arange(self.groups).repeat_interleave(self.m_max)
            self.valid = torch.cat([torch.arange(self.m_max) < c for c in self.counts])
        self.a = make_a(self.rows, exact, g)
        self.b = make_b(self.groups, exact, g)
        self.weights = torch.rand(self.rows, device="cuda", generator=g) + 0.5
        if layout == "masked":  # [G, M_max, ...] views of the same memory
            gm = (self.groups, self.m_max)
            self.a = (self.a[0].view(gm + (K,)), dgx.get_mn_major_tma_aligned_tensor(
                self.a[1].contiguous().view(gm + (K // 128,))))
            self.weights = self.weights.view(gm)

    @property
    def lead(self):
        return (self.groups, self.m_max) if self.layout == "masked" else (self.rows,)

    def weight_for(self, swiglu: bool):
        b, s = (self.b[0][0], self.b[1][0]) if self.layout == "dense" else self.b
        return dgx.prepare_gate_up(b, s) if swiglu else (b, s)

    def call(self, b, d, **kw):
        if self.layout == "dense":
            dgx.fp8_gemm_nt(self.a, b, d, **kw)
        elif self.layout == "contiguous":
            dgx.m_grouped_fp8_gemm_nt_contiguous(self.a, b, d, self.m_indices, **kw)
        elif self.layout == "psum":
            m_grouped_fp8_gemm_nt_contiguous_psum(self.a, b, d, self.psum, **kw)
        else:
            dgx.m_grouped_fp8_gemm_nt_masked(self.a, b, d, self.masked_m, 128, **kw)

    def accumulators(self) -> torch.Tensor:
        """float64 [rows, N]: A . B[g(row)]^T of the dequantised operands, standard gate-up order."""
        a_q, a_s = (t.reshape(self.rows, -1) for t in self.a)
        a = a_q.double() * a_s.double().repeat_interleave(128, dim=1)
        out = torch.empty(self.rows, N, device="cuda", dtype=torch.float64)
        for gi in range(self.groups):
            w = self.b[0][gi].double() * self.b[1][gi].double().repeat_interleave(128, 0).repeat_interleave(128, 1)
            rows = (self.row_group == gi).cuda()
            out[rows] = a[rows] @ w.T
        return out


def flat(t: torch.Tensor, rows: int) -> torch.Tensor:
    return t.reshape(rows, t.shape[-1])


def run_fused(p: Problem, name: str, fmt: str):
    swiglu, limit, rw, alpha = EPILOGUES[name]
    cols = INTER if swiglu else N
    d, sf = alloc_out(p.lead, cols, fmt)
    kw = dict(swiglu=swiglu, use_ue8m0=fmt == "ue8m0")
    if limit is not None:
        kw["swiglu_limit"] = limit
    if rw:
        kw["row_weight"] = p.weights
    if alpha is not None:
        kw["alpha"] = alpha
    p.call(p.weight_for(swiglu), (d, sf), **kw)
    torch.cuda.synchronize()
    return d, sf, cols


# --- tests --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["fp8", "fp8_rw_alpha"])
def test_fp8_output_is_bitwise_the_torch_quantisation(layout, fmt, name):
    """Exact FP32 accumulators: bytes and scales equal the torch quantisation of the same FP32 values."""
    p = Problem(layout, exact=True, seed=1)
    d, sf, cols = run_fused(p, name, fmt)
    _, _, rw, alpha = EPILOGUES[name]
    h = p.accumulators().float()
    factor = torch.ones(p.rows, device="cuda")
    if alpha is not None:
        factor = factor * alpha
    if rw:
        factor = factor * p.weights.reshape(-1)
    if rw or alpha is not None:
        h = h * factor.unsqueeze(1)
    ref_q, ref_sf = quantise(h, "fp32" if fmt == "fp32" else "ue8m0")
    valid = p.valid.cuda()
    got_q = flat(d, p.rows).view(torch.uint8)
    got_sf = flat(read_scales(sf, fmt, cols), p.rows)
    assert torch.equal(got_q[valid], ref_q.view(torch.uint8)[valid]), "FP8 bytes differ from the torch reference"
    assert torch.equal(got_sf[valid].view(torch.int32), ref_sf[valid].view(torch.int32)), "scales differ"
    if layout == "masked":  # rows past each group's count untouched
        assert (got_q[~valid] == 0x7F).all(), "rows past masked_m were written"
        if fmt != "packed":
            assert torch.isnan(got_sf[~valid]).all(), "scales of rows past masked_m were written"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(EPILOGUES))
def test_fused_output_decodes_to_the_float64_result(layout, fmt, name):
    """Random inputs: every valid row decodes within FP8 rounding of float64 of the same math; SwiGLU fused is at
    least as accurate as GEMM -> BF16 -> silu * up -> quantise; scales as the float64 values imply."""
    p = Problem(layout, exact=False, seed=2)
    swiglu, limit, rw, alpha = EPILOGUES[name]
    d, sf, cols = run_fused(p, name, fmt)
    acc = p.accumulators()
    factor = torch.ones(p.rows, device="cuda", dtype=torch.float64)
    if alpha is not None:
        factor *= alpha
    if rw:
        factor *= p.weights.reshape(-1).double()
    ref = (silu_mul(acc, limit) if swiglu else acc) * factor.unsqueeze(1)
    valid = p.valid.cuda()
    got_sf = flat(read_scales(sf, fmt, cols), p.rows)
    got = decode(flat(d, p.rows).float(), got_sf)[valid]
    ref = ref[valid]
    assert torch.isfinite(got).all(), "valid rows or scales not written"
    scale = got_sf[valid].double().repeat_interleave(128, dim=1)
    # e4m3: half an ulp is 2^-4 of the value for normals; subnormals (below 2^-6 after scaling) 2^-10 absolute.
    # Plus the FP8 tensor cores' accumulation error (ACC_ERR of the group's amax, scale * 448: generous).
    tol = (ref.abs() * 2.0**-4 + scale * 2.0**-9) * (1 + 1e-3) + scale * 448 * ACC_ERR
    worst = float(((got - ref).abs() / tol).max())
    assert worst <= 1.0, f"decoded outputs off by {worst:.3f} of FP8 rounding"
    amax = ref.abs().view(ref.shape[0], -1, 128).amax(dim=2).clamp(min=1e-4) / 448.0
    got_sf = got_sf[valid].double()
    if fmt == "fp32":
        assert torch.allclose(got_sf, amax, rtol=ACC_ERR, atol=0), "scales off the float64 amax / 448"
    else:
        # The kernel's amax is within ACC_ERR of the float64 one, so where a power of two lies that close (log2
        # distance below -log2(1 - ACC_ERR)), either side is right. The powers of two are built exactly.
        log2 = torch.log2(amax)
        near = (log2 - log2.round()).abs() < -math.log2(1 - ACC_ERR) * 1.01
        ref_sf = ceil_pow2_f64(amax)
        off = (got_sf != ref_sf) & ~near
        assert not off.any(), (f"UE8M0 scales off the float64 ones in {int(off.sum())} of {off.numel()} groups, e.g. "
                               f"{got_sf[off][:4].tolist()} for {ref_sf[off][:4].tolist()}")
    if swiglu:
        unfused = unfused_swiglu(p, limit, factor, fmt)[valid]
        err_fused = float((got - ref).norm() / ref.norm())
        err_unfused = float((unfused - ref).norm() / ref.norm())
        assert err_fused <= err_unfused * 1.01, f"fused {err_fused:.4e} less accurate than unfused {err_unfused:.4e}"


def unfused_swiglu(p: Problem, limit, factor, fmt) -> torch.Tensor:
    """GEMM to BF16 (dgx), silu(gate) * up in FP32 (torch), quantised and decoded."""
    d = torch.empty(p.lead + (N,), device="cuda", dtype=torch.bfloat16)
    p.call(p.weight_for(False), d)
    h = silu_mul(flat(d, p.rows).float(), limit) * factor.float().unsqueeze(1)
    q, sf = quantise(h, "fp32" if fmt == "fp32" else "ue8m0")
    return decode(q.float(), sf)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bf16_output_with_alpha(layout):
    p = Problem(layout, exact=True, seed=3)
    d = torch.full(p.lead + (N,), float("nan"), device="cuda", dtype=torch.bfloat16)
    p.call(p.weight_for(False), d, alpha=0.375)
    torch.cuda.synchronize()
    ref = (p.accumulators().float() * 0.375).to(torch.bfloat16)
    valid = p.valid.cuda()
    assert torch.equal(flat(d, p.rows)[valid].view(torch.int16), ref[valid].view(torch.int16))


@pytest.mark.parametrize("fmt", FORMATS)
def test_masked_graph_replay_follows_new_counts(fmt):
    p = Problem("masked", exact=True, seed=4)
    b = p.weight_for(True)
    d, sf = alloc_out(p.lead, INTER, fmt)
    kw = dict(swiglu=True, swiglu_limit=LIMIT, row_weight=p.weights, use_ue8m0=fmt == "ue8m0")
    p.call(b, (d, sf), **kw)  # compile and plan outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        p.call(b, (d, sf), **kw)
    for counts in ([3, 0, 256, 77], [256, 129, 1, 0]):
        d.view(torch.uint8).fill_(0x7F)
        p.masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want, _, _ = run_fused_with_counts(p, counts, fmt)
        for gi, c in enumerate(counts):
            assert torch.equal(d[gi, :c].view(torch.uint8), want[gi, :c].view(torch.uint8)), f"group {gi}"
            assert (d[gi, c:].view(torch.uint8) == 0x7F).all(), f"group {gi}: rows past the count written"


def run_fused_with_counts(p: Problem, counts, fmt):
    """The eager (uncaptured) call with the same arguments as the graph, for `counts`."""
    p.masked_m.copy_(torch.tensor(counts, dtype=torch.int32))
    d, sf = alloc_out(p.lead, INTER, fmt)
    p.call(p.weight_for(True), (d, sf), swiglu=True, swiglu_limit=LIMIT, row_weight=p.weights,
           use_ue8m0=fmt == "ue8m0")
    torch.cuda.synchronize()
    return d, sf, INTER


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_outputs_are_deterministic(layout):
    p = Problem(layout, exact=False, seed=5)
    first = run_fused(p, "swiglu_limit_rw_alpha", "fp32")
    for _ in range(3):
        again = run_fused(p, "swiglu_limit_rw_alpha", "fp32")
        assert torch.equal(first[0].view(torch.uint8), again[0].view(torch.uint8))
        assert torch.equal(first[1].nan_to_num(0).view(torch.int32), again[1].nan_to_num(0).view(torch.int32))


def test_unprepared_gate_up_weight_is_refused_on_the_gpu():
    p = Problem("dense", exact=True)
    d, sf = alloc_out(p.lead, INTER, "fp32")
    b = p.weight_for(True)
    with pytest.raises(ValueError, match="prepare_gate_up"):
        p.call((b[0].clone(), b[1]), (d, sf), swiglu=True)
    with pytest.raises(ValueError, match="prepare_gate_up"):
        p.call(p.weight_for(False), (d, sf), swiglu=True)


@pytest.mark.parametrize("block_m", [64, 128])
def test_masked_swiglu_of_either_tile_height_decodes_to_the_float64_result(block_m):
    """The heuristic takes 128-row SwiGLU units for narrow masked groups (one round of the SMs) and 64-row ones
    elsewhere: both heights, forced, decode within FP8 rounding of float64, rows past the counts untouched."""
    from dgx import heuristics
    from dgx.kernels.fp8_epilogue import Epilogue

    p = Problem("masked", exact=False, seed=6)
    epilogue = Epilogue(swiglu=True, clamp=True, row_weight=True)
    config = heuristics.choose_fused("m_grouped_masked", 128, N, K, p.groups, torch.cuda.get_device_properties(0)
                                     .multi_processor_count, epilogue, block_m=block_m).config
    d, sf = alloc_out(p.lead, INTER, "fp32")
    p.call(p.weight_for(True), (d, sf), swiglu=True, swiglu_limit=LIMIT, row_weight=p.weights, config=config)
    torch.cuda.synchronize()
    valid = p.valid.cuda()
    ref = (silu_mul(p.accumulators(), LIMIT) * p.weights.reshape(-1).double().unsqueeze(1))[valid]
    got_sf = flat(sf, p.rows)[valid].double()
    got = flat(d, p.rows).float()[valid].double() * got_sf.repeat_interleave(128, dim=1)
    scale = got_sf.repeat_interleave(128, dim=1)
    tol = (ref.abs() * 2.0**-4 + scale * 2.0**-9) * (1 + 1e-3) + scale * 448 * ACC_ERR
    assert float(((got - ref).abs() / tol).max()) <= 1.0
    assert (flat(d, p.rows).view(torch.uint8)[~valid] == 0x7F).all(), "rows past masked_m were written"
