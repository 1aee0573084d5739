"""dgx.deep_gemm against DeepGEMM's recorded API (dgx/deep_gemm/api_54e2261.json, taken from DeepGEMM 54e2261, its
2.6.1 release): every public name of every module is there, with a signature that accepts every call DeepGEMM's
accepts; the names dgx cannot run raise errors that say why; the torch-only helpers compute what DeepGEMM's do."""

from __future__ import annotations

import importlib
import inspect
import re
import types

import pytest

torch = pytest.importorskip("torch")

import dgx.deep_gemm as dg  # noqa: E402
from dgx.deep_gemm import pending, reference  # noqa: E402
from dgx.errors import FamilyMissingError, Sm100OnlyError  # noqa: E402

P = inspect.Parameter
RECORD = reference.record()


def _compatibility_problems(theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """Why `ours` would refuse (or read differently) a call `theirs` accepts: the same parameters in the same order
    (names too, unless theirs are positional-only), the same defaults; extras only after them and keyword-only or
    with a default."""
    problems = []
    their_params, our_params = list(theirs.parameters.values()), list(ours.parameters.values())
    for i, p in enumerate(their_params):
        if i >= len(our_params):
            problems.append(f"no parameter {p.name} (position {i})")
            continue
        q = our_params[i]
        if p.kind == P.POSITIONAL_ONLY:
            if q.kind not in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
                problems.append(f"position {i}: {q.name} is {q.kind.description}, not positional")
        elif p.kind != q.kind or p.name != q.name:
            problems.append(f"position {i}: {q.kind.description} {q.name}, DeepGEMM's is {p.kind.description} {p.name}")
        if p.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            continue
        if p.default is P.empty and q.default is not P.empty:
            problems.append(f"{q.name}: has default {q.default!r}, DeepGEMM's is required")
        if p.default is not P.empty and (q.default is P.empty or q.default != p.default
                                         or type(q.default) is not type(p.default)):
            problems.append(f"{q.name}: default {q.default!r}, DeepGEMM's is {p.default!r}")
    for q in our_params[len(their_params):]:
        if q.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD) and q.default is P.empty:
            problems.append(f"extra required parameter {q.name}")
    return problems


def _entries():
    for module, names in RECORD["modules"].items():
        for name, entry in names.items():
            yield module, name, entry


def test_the_record_names_its_deepgemm_commit():
    assert RECORD["repository"] == "deepseek-ai/DeepGEMM"
    assert RECORD["commit"].startswith("54e2261") and len(RECORD["commit"]) == 40 and RECORD["version"] == "2.6.1"
    assert reference.commit() == "54e2261" and dg.__version__ == RECORD["version"]
    assert len(RECORD["modules"]["deep_gemm"]) == 83


@pytest.mark.parametrize("module, name, entry", list(_entries()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_recorded_name_is_there_and_takes_deepgemms_calls(module, name, entry):
    ours = importlib.import_module("dgx." + module)
    assert hasattr(ours, name), f"dgx.{module} has no {name}"
    obj = getattr(ours, name)
    if entry == "module":
        assert isinstance(obj, types.ModuleType), name
        expected = {"math": "dgx.deep_gemm.utils.math", "layout": "dgx.deep_gemm.utils.layout",
                    "dist": "dgx.deep_gemm.utils.dist"}.get(name, f"dgx.deep_gemm.{name}")
        assert obj.__name__ == expected
        return
    if entry.startswith("class"):
        assert isinstance(obj, type), f"{name}: DeepGEMM's is a class"
    assert callable(obj)
    problems = _compatibility_problems(reference.parse_signature(entry), inspect.signature(obj))
    assert not problems, f"dgx.{module}.{name}{inspect.signature(obj)} vs DeepGEMM's {entry}: {problems}"


def test_the_same_name_is_the_same_object_in_every_module():
    for module, name, entry in _entries():
        if entry != "module" and module != "deep_gemm" and name in RECORD["modules"]["deep_gemm"]:
            assert getattr(importlib.import_module("dgx." + module), name) is getattr(dg, name), (module, name)
    assert dg.fp8_fp4_gemm_nt is dg.fp8_gemm_nt and dg.fp8_m_grouped_gemm_nt_masked is dg.m_grouped_fp8_gemm_nt_masked


def test_the_compatibility_check_catches_what_it_should():
    theirs = reference.parse_signature("(a, b, c=None, /, d='nk')")
    assert not _compatibility_problems(theirs, inspect.signature(lambda x, y, c=None, d="nk", *, e=1: 0))
    assert _compatibility_problems(theirs, inspect.signature(lambda a, b, c=None, d="mn": 0))  # default
    assert _compatibility_problems(theirs, inspect.signature(lambda a, b, d="nk", c=None: 0))  # order
    assert _compatibility_problems(theirs, inspect.signature(lambda a, b, c=None: 0))  # missing
    assert not _compatibility_problems(theirs, inspect.signature(lambda a, b, c=None, d="nk", e=None: 0))
    assert _compatibility_problems(theirs, inspect.signature(lambda a, b, c=None, d="nk", *, e: 0))  # required extra
    assert _compatibility_problems(theirs, inspect.signature(lambda a, b, c=0, d="nk": 0))  # None vs 0
    assert reference.parse_signature("(x, dtype=torch.float32)").parameters["dtype"].default is torch.float32


# --- the names dgx cannot run ---------------------------------------------------------------------------------------

PENDING_FAMILIES = {
    "BF16 GEMM": {"bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "m_grouped_bf16_gemm_nt_contiguous",
                  "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked",
                  "bf16_m_grouped_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous"},
    "einsum": {"einsum", "fp8_einsum"},
    pending.HC_PRENORM: {"tf32_hc_prenorm_gemm"},
    pending.SKIP_HEAD_MID: {"fp8_gemm_nt_skip_head_mid"},
    pending.MQA_FP4: {"fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits"},
}


def test_the_pending_table_holds_the_families_being_built():
    assert {n for names in PENDING_FAMILIES.values() for n in names} == set(pending.TOP_LEVEL)
    for family, names in PENDING_FAMILIES.items():
        for name in names:
            fn = getattr(dg, name)
            assert fn is pending.TOP_LEVEL[name]
            if getattr(fn, "family", None) is None:
                continue  # the family landed: its real function is checked against the record above
            assert fn.family == family
            args = [None] * sum(p.default is P.empty for p in inspect.signature(fn).parameters.values())
            with pytest.raises(FamilyMissingError, match=re.escape(f"{name}: dgx has no {family} family yet")) as info:
                fn(*args)
            assert isinstance(info.value, NotImplementedError)
            with pytest.raises(TypeError):  # DeepGEMM's signature refuses this call, and so does the stand-in
                fn(*args, no_such_argument=1)
    for name in RECORD["modules"]["deep_gemm.legacy"]:
        assert getattr(dg.legacy, name) is pending.LEGACY[name]
        if getattr(dg.legacy, name).__dict__.get("family"):
            with pytest.raises(FamilyMissingError, match="dgx has no BF16 GEMM family yet"):
                getattr(dg.legacy, name)(None, None, None, None, None) if "k_grouped" in name else \
                    getattr(dg.legacy, name)(None, None, None, None)


@pytest.mark.parametrize("name, args", [
    ("k_grouped_fp8_gemm_tn_contiguous", (None,) * 5),
    ("get_symm_buffer_for_mega_moe", (None,) * 6),
    ("transform_weights_for_mega_moe", (None, None)),
    ("fp8_fp4_mega_moe", (None,) * 4),
    ("bf16_mega_moe", (None,) * 4),
    ("SymmBuffer", (None,) * 7),
])
def test_sm100_names_say_so(name, args):
    with pytest.raises(Sm100OnlyError, match=f"^{name}: .*sm_100 \\(Blackwell\\) only") as info:
        getattr(dg, name)(*args)
    assert isinstance(info.value, NotImplementedError)
    assert getattr(dg.mega, name, getattr(dg, name)) is getattr(dg, name)


def test_fp4_operands_are_sm100_only_and_indices_are_checked():
    a = (torch.empty(128, 256, dtype=torch.int8), torch.ones(128, 8))
    b = (torch.empty(256, 512, dtype=torch.float8_e4m3fn), torch.ones(2, 4))
    with pytest.raises(Sm100OnlyError, match=r"^fp8_gemm_nt: a is torch.int8, packed FP4 operands"):
        dg.fp8_fp4_gemm_nt(a, b, torch.empty(128, 256, dtype=torch.bfloat16))
    with pytest.raises(Sm100OnlyError, match=r"recipe_b=\(1, 32\)"):
        dg.m_grouped_fp8_fp4_gemm_nt_masked(b, b, None, None, 1, recipe_a=(1, 128), recipe_b=(1, 32))
    # indices= (a query row per token with its own sequence) runs on sm_90 too: it reaches dgx's own checks
    with pytest.raises(TypeError, match="context_lens: expected a tensor"):
        dg.get_paged_mqa_logits_metadata(None, 64, 132, indices=torch.zeros(1, dtype=torch.int32))
    with pytest.raises((TypeError, ValueError)):
        dg.fp8_paged_mqa_logits(*(None,) * 7, False, torch.zeros(1, dtype=torch.int32))


# --- cublaslt_gemm_* through torch ------------------------------------------------------------------------------


def _reference(a, b, c=None):
    out = a.double() @ b.double().t()
    return out + c.double() if c is not None else out


@pytest.mark.parametrize("form", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
def test_cublaslt_forms_against_float64(form, d_dtype):
    from dgx.deep_gemm.testing import calc_diff

    g = torch.Generator().manual_seed(1)
    m, n, k = 48, 40, 96
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(n, k, generator=g).bfloat16()
    a_in = a.t().contiguous() if form[0] == "t" else a  # [K, M] for the t forms
    b_in = b.t().contiguous() if form[1] == "n" else b  # [K, N] for the n forms
    fn = getattr(dg, f"cublaslt_gemm_{form}")
    d = torch.full((m, n), float("nan"), dtype=d_dtype)  # poisoned: every element must be written
    fn(a_in, b_in, d)
    ref = _reference(a, b)
    assert not d.isnan().any() and calc_diff(d, ref) < (1e-5 if d_dtype == torch.bfloat16 else 1e-9)
    c = torch.randn(m, n, generator=g).to(d_dtype) * 32
    d2 = c.clone()
    fn(a_in, b_in, d2, c=d2)  # accumulate in place
    assert calc_diff(d2, _reference(a, b, c)) < (1e-5 if d_dtype == torch.bfloat16 else 1e-9)
    d3 = torch.full((m, n), float("nan"), dtype=d_dtype)
    fn(a_in, b_in, d3, c)  # c another tensor: d = c + a.b^T, c unchanged
    assert torch.equal(d3, d2)


def test_cublaslt_fp8_edges_and_errors():
    g = torch.Generator().manual_seed(2)
    a = (torch.randn(32, 64, generator=g) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(48, 64, generator=g) * 4).to(torch.float8_e4m3fn)
    d = torch.full((32, 48), float("nan"), dtype=torch.float32)
    dg.cublaslt_gemm_nt(a, b, d)
    assert torch.allclose(d.double(), _reference(a.float(), b.float()), rtol=1e-5, atol=1e-3)
    c = torch.ones(32, 48)
    dg.cublaslt_gemm_nt(a[:, :0], b[:, :0], d, c)  # K = 0: d = c
    assert torch.equal(d, c)
    dg.cublaslt_gemm_nt(a[:, :0], b[:, :0], d)  # K = 0, no c: d = 0
    assert not d.any()
    dg.cublaslt_gemm_nt(a[:0], b, d[:0])  # M = 0: nothing
    with pytest.raises(ValueError, match=r"expected a \[M, K\], b \[N, K\] and d \[M, N\]"):
        dg.cublaslt_gemm_nt(a, b, d.t())
    with pytest.raises(TypeError, match="d: expected bfloat16 or float32; got torch.float16"):
        dg.cublaslt_gemm_nt(a, b, d.half())
    with pytest.raises(TypeError, match="a and b: expected one dtype"):
        dg.cublaslt_gemm_nt(a, b.float(), d)


# --- the torch helpers of deep_gemm.utils -------------------------------------------------------------------------

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_fp4_cast_round_trip_and_rounding():
    # Values that are e2m1 values times a power-of-two scale come back exactly; scale = amax / 6 = 1 here.
    values = torch.tensor(E2M1 + [-v for v in E2M1], dtype=torch.float32)
    x = values[torch.randint(0, 16, (8, 256), generator=torch.Generator().manual_seed(3))]
    x[:, ::128] = 6.0  # every 128-block's amax is 6
    packed, sf = dg.per_token_cast_to_fp4(x, use_ue8m0=True)
    assert packed.dtype == torch.int8 and packed.shape == (8, 128) and sf.shape == (8, 2) and torch.all(sf == 1.0)
    assert torch.equal(dg.cast_back_from_fp4(packed, sf), x)
    # nibble order: element 2j in the low nibble of byte j; -0.0 is stored as +0
    p, _ = dg.per_token_cast_to_fp4(torch.tensor([[0.5, -6.0, -0.0, 6.0]]), use_ue8m0=False, gran_k=4)
    assert p.view(torch.uint8).tolist() == [[0x1 | (0xF << 4), 0x0 | (0x7 << 4)]]
    # rounding to the nearest e2m1 value, midpoints down (scale 1: amax 6)
    y = torch.tensor([[6.0, 0.25, 0.26, 2.5, 2.6, 5.0, 5.1, -1.74]])
    q, s = dg.per_token_cast_to_fp4(y, use_ue8m0=False, gran_k=8)
    assert dg.cast_back_from_fp4(q, s, gran_k=8).tolist() == [[6.0, 0.0, 0.5, 2.0, 3.0, 4.0, 6.0, -1.5]]
    # packed UE8M0 scales: the count padded to a multiple of 4 with 1.0
    q, packed_sf = dg.per_token_cast_to_fp4(torch.randn(4, 64), use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)
    assert packed_sf.dtype == torch.int32 and packed_sf.shape == (4, 1)
    assert dg.unpack_ue8m0_from_int(packed_sf)[:, 2:].eq(1.0).all()
    back = dg.cast_back_from_fp4(q, packed_sf, gran_k=32, use_packed_ue8m0=True)
    assert back.shape == (4, 64)
    with pytest.raises(ValueError, match="use_packed_ue8m0: packing needs UE8M0"):
        dg.per_token_cast_to_fp4(x, use_ue8m0=False, use_packed_ue8m0=True)


def test_transpose_packed_fp4():
    g = torch.Generator().manual_seed(4)
    codes = torch.randint(0, 16, (6, 10), generator=g, dtype=torch.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(torch.int8)
    t = dg.transpose_packed_fp4(packed)
    tc = codes.t().contiguous()
    assert torch.equal(t.view(torch.uint8), tc[:, 0::2] | (tc[:, 1::2] << 4)) and t.shape == (10, 3)
    with pytest.raises(ValueError, match="even number of rows"):
        dg.transpose_packed_fp4(packed[:5])


def _packed_reference(sf_group: torch.Tensor) -> torch.Tensor:
    """[rows, MN] UE8M0-valued scales -> int32 [ceil(rows / 4), MN] exponent bytes, written independently."""
    rows, mn = sf_group.shape
    exps = (sf_group.view(torch.int32) >> 23).tolist()
    out = torch.zeros((rows + 3) // 4, mn, dtype=torch.int64)
    for r in range(rows):
        for c in range(mn):
            out[r // 4, c] += exps[r][c] << (8 * (r % 4))
    return torch.where(out >= 2**31, out - 2**32, out).to(torch.int32)


@pytest.mark.parametrize("gran_k", [128, 32])
def test_k_grouped_packed_ue8m0(gran_k):
    from dgx.deep_gemm.utils import per_channel_cast_to_fp8

    g = torch.Generator().manual_seed(5)
    ks, mn = [gran_k * 5, 0, gran_k * 2, gran_k * 9], 12
    sfs = [per_channel_cast_to_fp8(torch.randn(k, mn, generator=g), use_ue8m0=True, gran_k=gran_k)[1] for k in ks]
    sf = sf0 = torch.cat(sfs)
    layout = torch.tensor(ks, dtype=torch.int32)
    out = dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, ks, gran_k, gran_k)
    assert out.dtype == torch.int32 and out.shape == (2 + 0 + 1 + 3, mn)
    assert torch.equal(out, torch.cat([_packed_reference(s) for s in sfs]))
    # prefix-sum layout: real K per group from the sums (groups start at multiples of k_alignment), result sized by
    # the aligned ks (or DeepGEMM's upper bound without them); the groups' words come first, one after another
    real = [gran_k * 5 - 7, 1, gran_k * 2, gran_k * 9 - gran_k // 2]
    align = 160 if gran_k == 32 else 256
    ends, end = [], 0
    for k in real:
        end = -(-end // align) * align + k
        ends.append(end)
    sfs = [per_channel_cast_to_fp8(torch.randn(-(-k // gran_k) * gran_k, mn, generator=g), True, gran_k)[1]
           for k in real]
    sf = torch.cat(sfs)
    expected = torch.cat([_packed_reference(s) for s in sfs])
    aligned = [-(-k // align) * align for k in real]
    for ks_cpu in (aligned, None, []):
        out = dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(
            sf, torch.tensor(ends, dtype=torch.int32), ks_cpu, gran_k, align, use_psum_layout=True)
        assert out.shape[0] >= expected.shape[0] and torch.equal(out[:expected.shape[0]], expected), ks_cpu
    with pytest.raises(ValueError, match=r"sf: expected sum of ceil\(k / "):
        dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf0[1:], layout, ks, gran_k, gran_k)
    with pytest.raises(ValueError, match="None or \\[\\] only with use_psum_layout"):
        dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, None, gran_k, gran_k)
    with pytest.raises(ValueError, match="gran_k: expected 32 or 128"):
        dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, ks, 64, 64)


# --- deep_gemm.testing ----------------------------------------------------------------------------------------------


def test_testing_helpers(monkeypatch, capfd):
    from dgx.deep_gemm import testing

    x = torch.randn(64, 64)
    assert testing.calc_diff(x, x) < 1e-12 and abs(testing.calc_diff(x, -x) - 2.0) < 1e-12
    assert testing.calc_diff(torch.zeros(3), torch.zeros(3)) == 0.0
    assert testing.count_bytes(x, (x.half(), None), [torch.empty(3, dtype=torch.int8)]) == 64 * 64 * 6 + 3
    testing.assert_bitwise_equal(x, x.clone())
    with pytest.raises(AssertionError, match=r"bitwise mismatch \(lbl\): [1-4] of 16384 bytes differ, the first at byte 78[89] \(element 197"):
        y = x.clone()
        y[3, 5] += 1
        testing.assert_bitwise_equal(x, y, "lbl")
    seen = []

    @testing.ignore_env("DG_SOME_FLAG", lambda: True)
    def f():
        seen.append(__import__("os").environ.get("DG_SOME_FLAG"))

    monkeypatch.setenv("DG_SOME_FLAG", "1")
    f()
    assert seen == [None] and __import__("os").environ["DG_SOME_FLAG"] == "1"
    ran = []
    testing.test_filter(lambda: False)(lambda: ran.append(1))()
    testing.test_filter(lambda: True)(lambda: ran.append(2))()
    assert ran == [2]
    with testing.suppress_stdout_stderr():
        print("hidden")
        __import__("os").write(2, b"hidden too\n")
    print("shown")
    out, err = capfd.readouterr()
    assert "hidden" not in out + err and "shown" in out
    monkeypatch.setenv("DG_USE_NVIDIA_TOOLS", "1")  # under NVIDIA tools: no profiling, 1 per name, as DeepGEMM's
    assert testing.bench_kineto(lambda: None, ("a", "b")) == (1, 1) and testing.bench_kineto(lambda: None, "a") == 1
