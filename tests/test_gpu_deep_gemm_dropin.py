"""The drop-in's torch paths on the GPU: cublaslt_gemm_* (cuBLAS/cuBLASLt through torch) against float64 with DeepGEMM's
test thresholds, outputs poisoned first; the FP4 and K-grouped UE8M0 helpers bitwise against their CPU results; and an
FP8 GEMM reached through `import deep_gemm` in a fresh interpreter with DGX_AS_DEEP_GEMM=1."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


def _calc_diff(x, y) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


@pytest.mark.parametrize("m, n, k", [(1, 2112, 7168), (128, 576, 7168), (4096, 256, 7168), (129, 4104, 1000)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("form", ["nt", "nn", "tn", "tt"])
def test_cublaslt_bf16_against_float64(m, n, k, out_dtype, accumulate, form):
    import dgx.deep_gemm as dg

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.randn(m, n, device="cuda", generator=g).to(out_dtype) * 32 if accumulate else None
    ref = (a.double() @ b.double().t() + (c.double() if accumulate else 0)).to(out_dtype)  # as DeepGEMM's test
    d = c.clone() if accumulate else torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    a_in = a.t().contiguous() if form[0] == "t" else a
    b_in = b.t().contiguous() if form[1] == "n" else b
    getattr(dg, f"cublaslt_gemm_{form}")(a_in, b_in, d, c=d if accumulate else None)
    # DeepGEMM's test_bf16.py thresholds (BF16 accumulation into d: 1e-5, else 6e-7)
    threshold = 1e-5 if (accumulate and out_dtype == torch.bfloat16) else 6e-7
    assert not d.isnan().any() and _calc_diff(d, ref) < threshold


def test_cublaslt_fp8_unscaled():
    import dgx.deep_gemm as dg

    g = torch.Generator(device="cuda").manual_seed(7)
    a = (torch.randn(256, 512, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(384, 512, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    ref = a.double() @ b.double().t()
    for out_dtype in (torch.bfloat16, torch.float32):
        d = torch.full((256, 384), float("nan"), device="cuda", dtype=out_dtype)
        dg.cublaslt_gemm_nt(a, b, d)
        assert _calc_diff(d, ref) < 1e-5
    odd = torch.full((3, 384), float("nan"), device="cuda")  # M = 3: _scaled_mm refuses, the fallback runs
    dg.cublaslt_gemm_nt(a[:3], b, odd)
    assert _calc_diff(odd, ref[:3]) < 1e-5  # as above: Hopper's FP8 MMAs accumulate with fewer bits than FP32


def test_fp4_and_k_grouped_helpers_match_the_cpu():
    import dgx.deep_gemm as dg

    x = torch.randn(64, 512)
    for kwargs in ({"use_ue8m0": False}, {"use_ue8m0": True, "use_packed_ue8m0": True, "gran_k": 32}):
        q_cpu, s_cpu = dg.per_token_cast_to_fp4(x, **kwargs)
        q_gpu, s_gpu = dg.per_token_cast_to_fp4(x.cuda(), **kwargs)
        # the values bitwise; the scales to the last bits (GPU and CPU divide in different orders)
        assert torch.equal(q_gpu.cpu(), q_cpu) and torch.allclose(s_gpu.cpu(), s_cpu, rtol=1e-6, atol=0)
        assert torch.equal(dg.transpose_packed_fp4(q_gpu).cpu(), dg.transpose_packed_fp4(q_cpu))
    ks = [384, 0, 1024, 128]
    sf = torch.cat([dg.per_channel_cast_to_fp8(torch.randn(k, 256), True)[1] for k in ks])
    layout = torch.tensor(ks, dtype=torch.int32)
    cpu = dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf, layout, ks, 128, 128)
    gpu = dg.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf.cuda(), layout.cuda(), ks, 128, 128)
    assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)


def test_fp8_gemm_through_import_deep_gemm(tmp_path):
    code = textwrap.dedent("""
        import torch, deep_gemm, dgx.deep_gemm
        assert deep_gemm is dgx.deep_gemm
        from deep_gemm.utils import per_token_cast_to_fp8, per_block_cast_to_fp8
        a = torch.randn(256, 1024, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
        d = torch.full((256, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt(per_token_cast_to_fp8(a, False), per_block_cast_to_fp8(b, False), d)
        ref = a.double() @ b.double().t()
        diff = float(1 - 2 * (d.double() * ref).sum() / (d.double() ** 2 + ref ** 2).sum())
        assert diff < 1e-3, diff
        print("OK", diff)
    """)
    environ = dict(os.environ, DGX_AS_DEEP_GEMM="1", PYTHONPATH=str(ROOT))
    prelude = "from dgx import deep_gemm_alias; deep_gemm_alias.install()\n"  # what the installed .pth runs
    run = subprocess.run([sys.executable, "-c", prelude + code], env=environ, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "OK" in run.stdout, run.stderr
