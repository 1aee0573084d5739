"""dgx.deep_gemm on the CPU: the names and signatures of DeepGEMM's current API, recipe and layout checks, the
non-K-major forms, the prefix-sum layout's arguments, the runtime settings and the UE8M0 helpers. Nothing here
launches: the calls that pass every check are caught where they would reach dgx's GEMM entry points."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

import dgx  # noqa: E402
from dgx.errors import Sm100OnlyError  # noqa: E402
import dgx.deep_gemm as dg  # noqa: E402
from dgx.deep_gemm import fp8 as dg_fp8  # noqa: E402
from dgx import grouped_psum  # noqa: E402
from dgx.heuristics import choose_grouped  # noqa: E402
from dgx.kinds import Layout  # noqa: E402
from dgx.ue8m0 import get_mn_major_tma_aligned_packed_ue8m0_tensor  # noqa: E402

from fake_views import fake_view  # noqa: E402

# Keyword-only extras beyond DeepGEMM's parameters (tests/test_deep_gemm_api.py checks DeepGEMM's own): the older
# names of renamed arguments.
EXTRAS = {
    "m_grouped_fp8_gemm_nt_contiguous": {"m_indices": None},
    "m_grouped_fp8_gemm_nn_contiguous": {"m_indices": None},
    "k_grouped_fp8_gemm_nt_contiguous": {"ks": None, "ks_tensor": None},
}


def test_keyword_only_extras_are_the_older_names():
    for name, extras in EXTRAS.items():
        sig = inspect.signature(getattr(dg, name))
        assert {p.name: p.default for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY} == extras, name
    assert dgx.deep_gemm is dg  # reachable from the package too


def test_aliases_are_the_same_functions():
    assert dg.fp8_fp4_gemm_nt is dg.fp8_gemm_nt and dg.fp8_fp4_gemm_tt is dg.fp8_gemm_tt
    assert dg.m_grouped_fp8_fp4_gemm_nt_contiguous is dg.m_grouped_fp8_gemm_nt_contiguous
    assert dg.m_grouped_fp8_fp4_gemm_nt_masked is dg.m_grouped_fp8_gemm_nt_masked is dg.fp8_m_grouped_gemm_nt_masked
    assert dg.get_m_alignment_for_contiguous_layout is dg.get_k_alignment_for_contiguous_layout
    assert dg.get_pdl is dgx.pdl.get_pdl


def test_ignored_arguments_are_documented():
    for name in ("fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked"):
        doc = getattr(dg, name).__doc__
        assert "compiled_dims" in doc and "disable_ue8m0_cast" in doc and "ignored" in doc, name
    assert "ensure_zero_padding" in dg.m_grouped_fp8_gemm_nt_contiguous.__doc__
    assert "compiled_dims is ignored" in dg.k_grouped_fp8_gemm_nt_contiguous.__doc__
    for name in ("set_tc_util", "set_ignore_compile_dims", "set_block_size_multiple_of"):
        assert "gnored" in getattr(dg, name).__doc__, name


# --- dense: recipes, K-major, dispatch ------------------------------------------------------------------------------


def _dense_inputs(m=64, n=256, k=512, d_dtype=torch.bfloat16, per_row_b=False):
    a = (torch.empty(m, k, dtype=torch.float8_e4m3fn), torch.ones(m, k // 128))
    b = (torch.empty(n, k, dtype=torch.float8_e4m3fn), torch.ones(n if per_row_b else n // 128, k // 128))
    return a, b, torch.empty(m, n, dtype=d_dtype)


class Reached(Exception):
    pass


@pytest.fixture
def recorder(monkeypatch):
    """Replaces dgx's GEMM entry points under dgx.deep_gemm: each records its arguments and raises Reached."""
    calls = []

    def make(name):
        def fake(*args, **kwargs):
            calls.append((name, args, kwargs))
            raise Reached(name)

        return fake

    for name in ("_dgx_dense", "_dgx_contiguous", "_dgx_masked", "_dgx_contiguous_psum", "_dgx_k_grouped"):
        monkeypatch.setattr(dg_fp8, name, make(name))
    return calls


@pytest.mark.parametrize("recipe", [(1, 128, 128), None])
def test_bf16_recipe_reaches_the_dense_gemm(recorder, recipe):
    a, b, d = _dense_inputs()
    with pytest.raises(Reached):
        dg.fp8_gemm_nt(a, b, d, recipe=recipe)
    name, args, _ = recorder[0]
    assert name == "_dgx_dense" and args[0][0] is a[0] and args[0][1] is a[1] and args[1][1] is b[1]
    assert args[3] is None


def test_recipe_pairs_are_the_same_recipes(recorder):
    a, b, d = _dense_inputs()
    with pytest.raises(Reached):
        dg.fp8_gemm_nt(a, b, d, recipe_a=(1, 128), recipe_b=(128, 128))
    a, b, d = _dense_inputs(d_dtype=torch.float32, per_row_b=True)
    with pytest.raises(Reached):
        dg.fp8_gemm_nt(a, b, d, c=d, recipe_a=(1, 128), recipe_b=(1, 128))
    assert recorder[1][1][3] is d


def test_weight_gradient_recipe(recorder):
    a, b, d = _dense_inputs(d_dtype=torch.float32, per_row_b=True)
    with pytest.raises(Reached):
        dg.fp8_gemm_nt(a, b, d, c=d, recipe=(1, 1, 128))
    assert recorder[0][1][2] is d and recorder[0][1][3] is d


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"recipe": (1, 64, 128)}, ValueError, r"^recipe: expected \(1, 128, 128\).*\(1, 1, 128\).*got \(1, 64, 128\)"),
        ({"recipe": (1, 128, 32)}, Sm100OnlyError, r"recipe=\(1, 128, 32\) scales per 32 of K.*sm_100"),
        ({"recipe": (128, 128)}, TypeError, r"^recipe: expected a tuple of 3 ints"),
        ({"recipe": "1x128"}, TypeError, r"^recipe: expected a tuple of 3 ints"),
        ({"recipe": (1, 128, 128), "recipe_a": (1, 128), "recipe_b": (128, 128)}, ValueError, "not both"),
        ({"recipe_a": (1, 128)}, ValueError, r"^recipe_a, recipe_b: expected both or neither"),
        ({"recipe_a": (1, 32), "recipe_b": (128, 128)}, Sm100OnlyError, r"recipe_a=\(1, 32\).*sm_100"),
        ({"recipe_a": (1, 128), "recipe_b": (32, 32)}, Sm100OnlyError, r"recipe_b=\(32, 32\).*sm_100"),
        ({"recipe_a": (1, 128), "recipe_b": (64, 128)}, ValueError, r"^recipe_b: .*got \(64, 128\)"),
        ({"recipe": (1, 1, 128)}, ValueError, r"^d: recipe \(1, 1, 128\).*float32 d; got torch.bfloat16"),
        ({"compiled_dims": 3}, TypeError, r"^compiled_dims: expected a str"),
    ],
)
def test_dense_argument_errors(recorder, kwargs, error, message):
    a, b, d = _dense_inputs()
    with pytest.raises(error, match=message):
        dg.fp8_gemm_nt(a, b, d, **kwargs)
    assert not recorder


def test_bf16_recipe_refuses_an_fp32_d_and_c(recorder):
    a, b, d = _dense_inputs(d_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^d: recipe \(1, 128, 128\) writes a bfloat16 d; got a float32 d"):
        dg.fp8_gemm_nt(a, b, d, recipe=(1, 128, 128))
    a, b, d = _dense_inputs()
    with pytest.raises(ValueError, match=r"^c: recipe \(1, 128, 128\)"):
        dg.fp8_gemm_nt(a, b, d, c=d.float(), recipe=(1, 128, 128))
    assert not recorder


def test_k_zero_sets_d_to_c_without_a_launch(recorder):
    a = (torch.empty(4, 0, dtype=torch.float8_e4m3fn), torch.empty(4, 0))
    b = (torch.empty(8, 0, dtype=torch.float8_e4m3fn), torch.empty(8, 0))
    d = torch.full((4, 8), 7.0)
    dg.fp8_gemm_nt(a, b, d, c=torch.full((4, 8), 3.0), recipe=(1, 1, 128))
    assert torch.equal(d, torch.full((4, 8), 3.0))
    dg.fp8_gemm_nt(a, b, d)
    assert torch.equal(d, torch.zeros(4, 8)) and not recorder


@pytest.mark.parametrize(
    "fn, operand",
    [("fp8_gemm_nn", "b"), ("fp8_gemm_tn", "a"), ("fp8_gemm_tt", "a"), ("fp8_fp4_gemm_nn", "b")],
)
def test_non_k_major_forms_raise_naming_the_operand(recorder, fn, operand):
    m, n, k = 64, 256, 512
    # DeepGEMM's transposed operands as callers hold them: contiguous [K, M] / [K, N].
    a_t = (torch.empty(k, m, dtype=torch.float8_e4m3fn), torch.ones(k // 128, m))
    b_t = (torch.empty(k, n, dtype=torch.float8_e4m3fn), torch.ones(k // 128, n // 128))
    a, b, d = _dense_inputs(m, n, k)
    args = {"fp8_gemm_nn": (a, b_t), "fp8_fp4_gemm_nn": (a, b_t), "fp8_gemm_tn": (a_t, b_t), "fp8_gemm_tt": (a_t, b)}
    with pytest.raises(ValueError, match=rf"^{operand}: {fn.replace('fp4_', '')} takes {operand} as \[K, .*K-major.*"
                                         rf"row-major.*MN-major. Pass the transposed pair \({operand}\[0\].mT.contiguous\(\), "):
        getattr(dg, fn)(*args[fn], d)
    assert not recorder


def test_nt_with_an_mn_major_operand_raises_naming_it(recorder):
    a, b, d = _dense_inputs()
    b_mn = (b[0].t().contiguous().t(), b[1])  # [N, K] with stride 1 along N
    with pytest.raises(ValueError, match=r"^b: fp8_gemm_nt needs b K-major .*MN-major. Pass \(b\[0\].contiguous\(\), b\[1\]\)"):
        dg.fp8_gemm_nt(a, b_mn, d)
    assert not recorder


def test_transposed_forms_run_when_the_transpose_is_k_major(recorder):
    m, n, k = 64, 256, 512
    a, _, d = _dense_inputs(m, n, k)
    b_kn = torch.empty(n, k, dtype=torch.float8_e4m3fn).t()  # [K, N] stored column-major: its transpose is K-major
    sfb = torch.ones(n // 128, k // 128).t()
    with pytest.raises(Reached):
        dg.fp8_gemm_nn(a, (b_kn, sfb), d)
    _, args, _ = recorder[0]
    assert args[1][0].shape == (n, k) and args[1][0].stride() == (k, 1)
    assert args[1][1].shape == (n // 128, k // 128) and args[1][1].is_contiguous()
    a_km = torch.empty(m, k, dtype=torch.float8_e4m3fn).t()
    sfa = torch.ones(k // 128, m)  # DeepGEMM's [K/128, M]: its transpose is the MN-major SFA
    with pytest.raises(Reached):
        dg.fp8_gemm_tt((a_km, sfa), _dense_inputs(m, n, k)[1], d)
    _, args, _ = recorder[1]
    assert args[0][0].shape == (m, k) and args[0][1].stride() == (1, m)


def test_an_mn_major_sfb_is_made_contiguous(recorder):
    a, b, d = _dense_inputs()
    sfb_mn = b[1].t().contiguous().t()
    with pytest.raises(Reached):
        dg.fp8_gemm_nt(a, (b[0], sfb_mn), d)
    assert recorder[0][1][1][1].is_contiguous() and torch.equal(recorder[0][1][1][1], sfb_mn)


def test_packed_scales_are_checked_before_the_gpu(recorder):
    a, b, d = _dense_inputs(64, 256, 1024)  # 8 k-blocks: two packed words per row
    with pytest.raises(ValueError, match=r"^SFA: packed UE8M0 scales .*\[\.\.\., M = 64, ceil\(K/512\) = 2\]; got"):
        dg.fp8_gemm_nt((a[0], torch.zeros(64, 3, dtype=torch.int32)), b, d)
    with pytest.raises(ValueError, match=r"^SFB: packed .*ceil\(N/128\) = 2"):
        dg.fp8_gemm_nt(a, (b[0], torch.zeros(256, 2, dtype=torch.int32)), d)  # per row, but the recipe is per block
    with pytest.raises(ValueError, match=r"^SFA: expected a tensor in CUDA device memory"):  # the right shape: unpacked on the GPU
        dg.fp8_gemm_nt((a[0], torch.zeros(64, 2, dtype=torch.int32)), b, d)
    assert not recorder


# --- M-grouped: contiguous (m_indices and prefix sums) and masked ------------------------------------------------


def _grouped_inputs(groups=4, m=512, n=256, k=512):
    a = (torch.empty(m, k, dtype=torch.float8_e4m3fn), torch.ones(m, k // 128))
    b = (torch.empty(groups, n, k, dtype=torch.float8_e4m3fn), torch.ones(groups, n // 128, k // 128))
    return a, b, torch.empty(m, n, dtype=torch.bfloat16)


@pytest.fixture
def alignment():
    yield
    dg.set_mk_alignment_for_contiguous_layout(128)


def test_contiguous_layouts_reach_their_entry_points(recorder, alignment):
    a, b, d = _grouped_inputs()
    m_indices = torch.zeros(512, dtype=torch.int32)
    psum = torch.tensor([100, 300, 300, 500], dtype=torch.int32)
    with pytest.raises(Reached):
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
    with pytest.raises(Reached):
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices=m_indices)  # the older keyword
    with pytest.raises(Reached):
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True, expected_m_for_psum_layout=120)
    dg.set_mk_alignment_for_contiguous_layout(256)
    with pytest.raises(Reached):
        dg.m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout=psum, use_psum_layout=True,
                                                ensure_zero_padding=False, recipe_a=(1, 128), recipe_b=(128, 128))
    names = [c[0] for c in recorder]
    assert names == ["_dgx_contiguous", "_dgx_contiguous", "_dgx_contiguous_psum", "_dgx_contiguous_psum"]
    assert recorder[1][1][3] is m_indices
    assert recorder[2][2] == {"alignment": 128, "expected_m": 120}
    assert recorder[3][2] == {"alignment": 256, "expected_m": None}


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d),
         TypeError, "missing the argument grouped_layout"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, mi, m_indices=mi),
         TypeError, "both grouped_layout and m_indices"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, mi, expected_m_for_psum_layout=64),
         ValueError, r"^expected_m_for_psum_layout: only with use_psum_layout=True"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, ps, use_psum_layout=True,
                                                                     expected_m_for_psum_layout=0),
         ValueError, r"^expected_m_for_psum_layout: expected an int >= 1; got 0"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, mi, use_psum_layout=True),
         ValueError, r"^grouped_layout: use_psum_layout=True takes one prefix sum per group, shape \(4,\)"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, ps),
         ValueError, r"^grouped_layout: the m_indices layout .* shape \(512,\); got shape \(4,\)"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, mi, recipe=(1, 1, 128)),
         ValueError, r"^recipe: expected \(1, 128, 128\) .* on sm_90; got \(1, 1, 128\)"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, mi, recipe_a=(1, 128), recipe_b=(1, 128)),
         ValueError, r"^recipe_b: expected \(128, 128\)"),
        (lambda a, b, d, mi, ps: dg.m_grouped_fp8_gemm_nn_contiguous(a, b, d, mi),
         ValueError, r"^b: m_grouped_fp8_gemm_nn_contiguous takes b as \[G, K, N\].*K-major"),
    ],
)
def test_contiguous_argument_errors(recorder, call, error, message):
    a, b, d = _grouped_inputs()
    with pytest.raises(error, match=message):
        call(a, b, d, torch.zeros(512, dtype=torch.int32), torch.zeros(4, dtype=torch.int32))
    assert not recorder


def test_contiguous_alignment_must_suit_the_layout(recorder, alignment):
    a, b, d = _grouped_inputs()
    dg.set_mk_alignment_for_contiguous_layout(64)
    with pytest.raises(ValueError, match=r"m_indices layout needs every group's rows padded to a multiple of 128; "
                                         r"get_mk_alignment_for_contiguous_layout\(\) is 64"):
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, torch.zeros(512, dtype=torch.int32))
    with pytest.raises(Reached):  # 64 suits the prefix-sum layout
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, torch.zeros(4, dtype=torch.int32), use_psum_layout=True)
    dg.set_mk_alignment_for_contiguous_layout(32)
    with pytest.raises(ValueError, match=r"prefix-sum layout needs the groups aligned to a multiple of 64 rows; "
                                         r"get_mk_alignment_for_contiguous_layout\(\) is 32"):
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, torch.zeros(4, dtype=torch.int32), use_psum_layout=True)


def test_masked_checks(recorder):
    a = (torch.empty(2, 64, 512, dtype=torch.float8_e4m3fn), torch.ones(2, 64, 4))
    b = (torch.empty(2, 256, 512, dtype=torch.float8_e4m3fn), torch.ones(2, 2, 4))
    d = torch.empty(2, 64, 256, dtype=torch.bfloat16)
    mm = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^recipe: expected \(1, 128, 128\).*got \(128, 128, 128\)"):
        dg.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, 32, recipe=(128, 128, 128))
    with pytest.raises(ValueError, match=r"^expected_m: expected an int >= 1; got 0"):
        dg.m_grouped_fp8_gemm_nt_masked(a, b, d, mm, 0)
    with pytest.raises(ValueError, match=r"^a: m_grouped_fp8_gemm_nt_masked needs a K-major"):
        dg.m_grouped_fp8_gemm_nt_masked((a[0].transpose(1, 2).contiguous().transpose(1, 2), a[1]), b, d, mm, 32)
    with pytest.raises(Reached):
        dg.fp8_m_grouped_gemm_nt_masked(a, b, d, mm, 32, disable_ue8m0_cast=True)
    assert recorder[0][1][4] == 32


# --- K-grouped ----------------------------------------------------------------------------------------------------


def _k_grouped_inputs(m=256, n=128, ks=(256, 128)):
    kt = sum(ks)
    a = (torch.empty(m * kt, dtype=torch.float8_e4m3fn), torch.ones(kt // 128, m))
    b = (torch.empty(n * kt, dtype=torch.float8_e4m3fn), torch.ones(kt // 128, n))
    return a, b, torch.full((len(ks), m, n), 5.0), list(ks), torch.tensor(ks, dtype=torch.int32)


def test_k_grouped_c_and_names(recorder):
    a, b, d, ks, kt = _k_grouped_inputs()
    c = torch.full_like(d, 2.0)
    with pytest.raises(Reached):
        dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, kt, c)
    assert torch.equal(d, c)  # d = c first, then the kernel adds A . B^T
    with pytest.raises(Reached):
        dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, kt)
    assert torch.equal(d, torch.zeros_like(d))  # no c: d = A . B^T
    d.fill_(4.0)
    with pytest.raises(Reached):
        dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks_cpu=ks, grouped_layout=kt, c=d, use_psum_layout=False)
    assert torch.equal(d, torch.full_like(d, 4.0))  # c is d: accumulate in place
    assert [r[1][3] for r in recorder] == [ks, ks, ks] and recorder[2][1][4] is kt


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"recipe": (1, 128, 128)}, ValueError, r"^recipe: the K-grouped GEMM takes \(1, 1, 128\) only.*got \(1, 128, 128\)"),
        ({"use_psum_layout": True}, ValueError, r"^use_psum_layout: the K-grouped prefix-sum layout is sm_100 only"),
        ({"ks": [256, 128]}, TypeError, "both ks_cpu and ks"),
    ],
)
def test_k_grouped_argument_errors(recorder, kwargs, error, message):
    a, b, d, ks, kt = _k_grouped_inputs()
    with pytest.raises(error, match=message):
        dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks, kt, **kwargs)
    with pytest.raises(TypeError, match=r"missing the argument grouped_layout \(or ks_tensor\)"):
        dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d, ks)
    with pytest.raises(ValueError, match=r"^SFA: the K-grouped GEMM takes float32 scales"):
        dg.k_grouped_fp8_gemm_nt_contiguous((a[0], torch.zeros(256, 1, dtype=torch.int32)), b, d, ks, kt)
    # d is set to c (or 0) before dgx's checks: what would fail is checked first, and d is left as it was.
    with pytest.raises(ValueError, match=r"^d: expected float32 \[G = 2, M, N\]; got torch.bfloat16"):
        dg.k_grouped_fp8_gemm_nt_contiguous(a, b, d.bfloat16(), ks, kt)
    with pytest.raises(ValueError, match=r"^A: expected 256 x sum\(ks\) = 98304 elements; got 98303"):
        dg.k_grouped_fp8_gemm_nt_contiguous((a[0][1:], a[1]), b, d, ks, kt)
    assert torch.equal(d, torch.full_like(d, 5.0))
    assert not recorder


# --- dgx.grouped_psum: its checks on fake device tensors --------------------------------------------------------


class Planned(Exception):
    pass


@pytest.fixture
def no_psum_launch(monkeypatch):
    def plan(*args, **kwargs):
        raise Planned(args)

    monkeypatch.setattr(grouped_psum, "_plan", plan)


def _psum_views(**over):
    v = {
        "A": fake_view((1000, 512), "float8_e4m3fn"),
        "SFA": fake_view((1000, 4), strides=(1, 1000)),
        "B": fake_view((4, 256, 512), "float8_e4m3fn"),
        "SFB": fake_view((4, 2, 4)),
        "d": fake_view((1000, 256), "bfloat16"),
        "psum": fake_view((4,), "int32"),
    }
    v.update(over)
    return v


def _psum_call(v, **kwargs):
    grouped_psum.m_grouped_fp8_gemm_nt_contiguous_psum((v["A"], v["SFA"]), (v["B"], v["SFB"]), v["d"], v["psum"],
                                                       **kwargs)


def test_psum_valid_inputs_reach_the_plan(no_psum_launch):
    with pytest.raises(Planned) as info:
        _psum_call(_psum_views(), expected_m=200)
    m, n, k, groups, _device, heuristic_m, alignment, config = info.value.args[0]
    assert (m, n, k, groups, heuristic_m, alignment, config) == (1000, 256, 512, 4, 800, 128, None)
    with pytest.raises(Planned):  # M need not be a multiple of the alignment
        _psum_call(_psum_views(A=fake_view((1001, 512), "float8_e4m3fn"), SFA=fake_view((1001, 4), strides=(1, 1004)),
                               d=fake_view((1001, 256), "bfloat16")))


@pytest.mark.parametrize(
    "over, kwargs, error, message",
    [
        ({"psum": fake_view((5,), "int32")}, {}, ValueError, r"^grouped_layout: .*one prefix sum per group, shape \(4,\)"),
        ({"psum": fake_view((4,), "float32")}, {}, TypeError, r"^grouped_layout: expected dtype int32"),
        ({"psum": fake_view((4,), "int32", strides=(2,))}, {}, ValueError, r"^grouped_layout: expected a contiguous"),
        ({}, {"alignment": 96}, ValueError, r"^alignment: the prefix-sum layout needs .* multiple of 64 rows"),
        ({}, {"alignment": 0}, ValueError, r"^alignment: expected a positive int"),
        ({}, {"expected_m": 0}, ValueError, r"^expected_m_for_psum_layout: expected None or a positive int"),
        ({"d": fake_view((1000, 256), "float32")}, {}, TypeError, r"^d: expected dtype bfloat16"),
        ({"SFA": fake_view((1000, 5), strides=(1, 1000))}, {}, ValueError, r"^SFA: expected shape \(1000, 4\)"),
        ({"B": fake_view((4, 256, 256), "float8_e4m3fn")}, {}, ValueError, r"^B: expected K = 512"),
    ],
)
def test_psum_input_checks(no_psum_launch, over, kwargs, error, message):
    with pytest.raises(error, match=message):
        _psum_call(_psum_views(**over), **kwargs)


def test_psum_configs_follow_the_contiguous_heuristic():
    for m, n, k, groups in ((32768, 4096, 7168, 8), (768, 4096, 7168, 32), (144, 7168, 2048, 6), (40, 4096, 512, 2)):
        psum = grouped_psum.psum_config(m, n, k, groups, 132, 128)
        assert psum.layout == Layout.CONTIGUOUS_PSUM and psum.pair == 0 and psum.block_m == 128
        assert psum.kernel_name.startswith("dgx_fp8_gemm_nt_contiguous_psum_") and psum.warmup_kind == "m_grouped_contiguous_psum"
        assert grouped_psum.psum_config(m, n, k, groups, 132, 256).block_m == 128
        assert grouped_psum.psum_config(m, n, k, groups, 132, 64).block_m == 64
        assert grouped_psum.psum_config(m, n, k, groups, 132, 192).block_m == 64
    # Where the contiguous heuristic picks a 128-row tile without a cluster, the prefix-sum layout runs the same tile.
    contiguous = choose_grouped(Layout.CONTIGUOUS, 768, 4096, 7168, 32, 132).config
    assert (contiguous.block_m, contiguous.pair) == (128, 0)
    assert grouped_psum.psum_config(768, 4096, 7168, 32, 132, 128) == replace(contiguous, layout=Layout.CONTIGUOUS_PSUM)
    with pytest.raises(ValueError, match="multiple of 64"):
        grouped_psum.psum_config(32768, 4096, 7168, 8, 132, 96)


# --- settings -----------------------------------------------------------------------------------------------------


def test_settings(alignment):
    assert dg.get_tc_util() == 100
    dg.set_tc_util(80)
    assert dg.get_tc_util() == 80
    dg.set_tc_util(0)
    assert dg.get_tc_util() == 100
    with pytest.raises(ValueError, match=r"^new_tc_util: expected an int in \[0, 100\]; got 101"):
        dg.set_tc_util(101)
    assert dg.get_mk_alignment_for_contiguous_layout() == 128 == dg.get_theoretical_mk_alignment_for_contiguous_layout()
    assert dg.get_theoretical_mk_alignment_for_contiguous_layout(300) == 128
    dg.set_mk_alignment_for_contiguous_layout(256)
    assert dg.get_m_alignment_for_contiguous_layout() == 256
    with pytest.raises(ValueError, match="new_value"):
        dg.set_mk_alignment_for_contiguous_layout(0)
    assert dg.get_pdl() is False
    dg.set_pdl(True)
    assert dg.get_pdl() is True
    dg.set_pdl(False)
    dg.set_block_size_multiple_of(16)
    dg.set_block_size_multiple_of((16, 32))
    with pytest.raises(TypeError, match="new_value"):
        dg.set_block_size_multiple_of((1, 2, 3))
    dg.set_ignore_compile_dims(True)
    dg.set_ignore_compile_dims(False)
    with pytest.raises(ValueError, match="new_num_sms"):
        dg.set_num_sms(-1)


# --- UE8M0 and the quantisation helpers -------------------------------------------------------------------------


def _is_power_of_two(x):
    bits = x.view(torch.int32)
    return bool(((bits & 0x7FFFFF) == 0).all() and (bits > 0).all())


def test_ceil_to_ue8m0():
    x = torch.tensor([1.0, 1.5, 0.3, 2.0**-130, 0.0, 3e38, 0.25, -3.0, 448.0, 1e-4])
    y = dg.ceil_to_ue8m0(x)
    assert _is_power_of_two(y)
    assert y.tolist()[:3] == [1.0, 2.0, 0.5] and y[6] == 0.25 and y[7] == 4.0 and y[8] == 512.0
    assert y[3] == y[4] == 2.0**-126 and y[5] == 2.0**127
    r = torch.rand(1000) * 100 + 1e-6
    c = dg.ceil_to_ue8m0(r)
    assert bool((c >= r).all() and (c < 2 * r).all())


def test_pack_unpack_round_trip():
    sf = dg.ceil_to_ue8m0(torch.rand(3, 5, 8) * 4)
    packed = dg.pack_ue8m0_to_int(sf)
    assert packed.dtype == torch.int32 and packed.shape == (3, 5, 2)
    assert torch.equal(dg.unpack_ue8m0_from_int(packed), sf)
    exps = (sf.view(torch.int32) >> 23)
    word = packed[1, 2, 1].item() & 0xFFFFFFFF
    assert [(word >> (8 * j)) & 0xFF for j in range(4)] == exps[1, 2, 4:8].tolist()  # first scale, lowest byte
    with pytest.raises(ValueError, match="powers of two"):
        dg.pack_ue8m0_to_int(torch.full((4,), 3.0))
    with pytest.raises(ValueError, match="multiple of 4"):
        dg.pack_ue8m0_to_int(torch.ones(3))


@pytest.mark.parametrize("shape", [(7, 5), (2, 9, 13), (3, 4, 4), (1, 1)])
def test_mn_major_tma_aligned_packed_layout(shape):
    sf = dg.ceil_to_ue8m0(torch.rand(shape) * 8)
    packed = get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    *g, mn, kk = shape
    words = -(-kk // 4)
    aligned = -(-mn // 4) * 4
    assert packed.dtype == torch.int32 and packed.shape == (*g, mn, words)
    assert packed.stride()[-2:] == (1, aligned) and (not g or packed.stride(0) == words * aligned)
    unpacked = dg.unpack_ue8m0_from_int(packed.contiguous())
    assert torch.equal(unpacked[..., :kk], sf) and not unpacked[..., kk:].any()  # padding bytes are 0
    assert dg.get_mn_major_tma_aligned_packed_ue8m0_tensor is get_mn_major_tma_aligned_packed_ue8m0_tensor
    if len(shape) == 2:
        get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout=torch.tensor([3, 7], dtype=torch.int32))
    with pytest.raises(TypeError, match="^sf: expected float32"):
        get_mn_major_tma_aligned_packed_ue8m0_tensor(sf.double())


@pytest.mark.parametrize("use_ue8m0", [False, True])
@pytest.mark.parametrize("gran_k", [128, 32])
def test_per_token_cast(use_ue8m0, gran_k):
    x = torch.randn(33, 700) * 3
    q, sf = dg.per_token_cast_to_fp8(x, use_ue8m0, gran_k=gran_k)
    blocks = -(-700 // gran_k)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (33, 700) and q.is_contiguous()
    assert sf.shape == (33, blocks) and sf.is_contiguous()
    if use_ue8m0:
        assert _is_power_of_two(sf)
    deq = q.float() * sf.repeat_interleave(gran_k, dim=1)[:, :700]
    assert float((deq - x).norm() / x.norm()) < 0.08
    assert float(q.float().abs().max()) <= 448.0
    if use_ue8m0:
        q2, packed = dg.per_token_cast_to_fp8(x, True, gran_k=gran_k, use_packed_ue8m0=True)
        assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8)) and packed.shape == (33, -(-blocks // 4))
        assert torch.equal(dg.unpack_ue8m0_from_int(packed)[:, :blocks], sf)
    else:
        with pytest.raises(ValueError, match="use_packed_ue8m0"):
            dg.per_token_cast_to_fp8(x, False, use_packed_ue8m0=True)


@pytest.mark.parametrize("use_ue8m0", [False, True])
def test_block_channel_and_custom_casts(use_ue8m0):
    x = torch.randn(300, 260)
    q, sf = dg.per_block_cast_to_fp8(x, use_ue8m0)
    assert q.shape == x.shape and sf.shape == (3, 3)
    deq = q.float() * sf.repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)[:, :260]
    assert float((deq - x).norm() / x.norm()) < 0.08
    y = torch.randn(256, 12)
    q, sf = dg.per_channel_cast_to_fp8(y, use_ue8m0)
    assert q.shape == y.shape and sf.shape == (2, 12)
    assert float((q.float() * sf.repeat_interleave(128, 0) - y).norm() / y.norm()) < 0.08
    with pytest.raises(ValueError, match="multiple of gran_k"):
        dg.per_channel_cast_to_fp8(torch.randn(100, 4), use_ue8m0)
    z = torch.randn(4, 8, 16)
    q, sf = dg.per_custom_dims_cast_to_fp8(z, (0,), use_ue8m0)
    assert q.shape == z.shape and sf.shape == (4,)
    assert float((q.float() * sf.view(4, 1, 1) - z).norm() / z.norm()) < 0.08
    if use_ue8m0:
        assert _is_power_of_two(sf)


def test_transform_sf_into_required_layout():
    sfa = torch.rand(100, 4)
    out = dg.transform_sf_into_required_layout(sfa, 100, 512, (1, 128, 128), is_sfa=True)
    assert out.stride() == (1, 100) and torch.equal(out, sfa)
    sfb = torch.rand(2, 4).t().contiguous().t()
    out = dg.transform_sf_into_required_layout(sfb, 256, 512, (1, 128, 128), is_sfa=False)
    assert out.is_contiguous() and torch.equal(out, sfb)
    out = dg.transform_sf_into_required_layout(torch.rand(3, 100, 4), 100, 512, (1, 128), num_groups=3)
    assert out.stride() == (400, 1, 100)
    with pytest.raises(ValueError, match=r"^sf: expected shape \(2, 4\)"):
        dg.transform_sf_into_required_layout(torch.rand(256, 4), 256, 512, (1, 128, 128), is_sfa=False)
    with pytest.raises(ValueError, match="^is_sfa"):
        dg.transform_sf_into_required_layout(sfa, 100, 512, (1, 128, 128))
    with pytest.raises(Sm100OnlyError, match=r"recipe \(1, 32\) scales per 32 of K .* sm_100 only"):
        dg.transform_sf_into_required_layout(sfa, 100, 512, (1, 32))
    with pytest.raises(ValueError, match="^recipe: expected granularities"):
        dg.transform_sf_into_required_layout(sfa, 100, 512, (1, 64))
    with pytest.raises(ValueError, match="CUDA device memory"):  # packed: unpacked on the GPU
        dg.transform_sf_into_required_layout(torch.zeros(100, 1, dtype=torch.int32), 100, 512, (1, 128))
