"""A stand-in for DeepGEMM 2.6.1's Python package on the CPU (tests of dgx bench's DeepGEMM peer): its names and
call forms, the layout checks its C++ API makes on sm_90 (asserted here, so a layout the benchmark gets wrong fails
the call), and results computed in plain torch from the inputs it is given. Every call is recorded."""

from __future__ import annotations

import types

import torch

from dgx.bench import mqa_torch
from dgx.bench.problems import dequant_block, dequant_token, matmul_fp32

TMA_ALIGN = 4  # FP32 scales: rows padded to 16 bytes


def _aligned(rows: int) -> int:
    return (rows + TMA_ALIGN - 1) // TMA_ALIGN * TMA_ALIGN


def _check_mn_major(sf, name: str) -> None:
    """DeepGEMM's check of scales it reads without converting them: MN-major, TMA-aligned."""
    assert sf.dtype == torch.float32, name
    assert sf.stride(-2) == 1 and sf.stride(-1) == _aligned(sf.shape[-2]), f"{name}: strides {sf.stride()}"


class StandInDeepGemm(types.ModuleType):
    def __init__(self, version: str = "2.6.1", with_converter: bool = True, origin: str = "/opt/deep_gemm/__init__.py"):
        super().__init__("deep_gemm")
        self.__version__ = version
        self.__file__ = origin
        self.calls: list[tuple[str, tuple, dict]] = []
        self.alignment = 128
        if with_converter:
            self.get_mn_major_tma_aligned_tensor = self._convert

    def _record(self, name, args, kwargs):
        self.calls.append((name, args, kwargs))

    @staticmethod
    def _convert(sf):
        batched = sf.unsqueeze(0) if sf.dim() == 2 else sf
        g, mn, kb = batched.shape
        out = torch.empty_strided((g, mn, kb), (_aligned(mn) * kb, 1, _aligned(mn)), dtype=sf.dtype)
        out.copy_(batched)
        return out[0] if sf.dim() == 2 else out

    def get_num_sms(self):
        return 132

    def get_mk_alignment_for_contiguous_layout(self):
        return self.alignment

    def set_mk_alignment_for_contiguous_layout(self, value):
        self._record("set_mk_alignment_for_contiguous_layout", (value,), {})
        self.alignment = value

    # ---- GEMMs -------------------------------------------------------------------------------------

    def fp8_gemm_nt(self, a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims="nk",
                    disable_ue8m0_cast=False):
        self._record("fp8_gemm_nt", (a, b, d), dict(c=c, recipe=recipe, disable_ue8m0_cast=disable_ue8m0_cast))
        _check_mn_major(a[1], "sfa")
        if d.dtype == torch.float32:
            assert recipe == (1, 1, 128)
            _check_mn_major(b[1], "sfb")
            out = matmul_fp32(dequant_token(a[0], a[1]), dequant_token(b[0], b[1]))
            d.copy_((c if c is not None else 0) + out)
        else:
            assert b[1].is_contiguous()
            d.copy_(matmul_fp32(dequant_token(a[0], a[1]), dequant_block(b[0], b[1])))

    def m_grouped_fp8_gemm_nt_contiguous(self, a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None):
        self._record("m_grouped_fp8_gemm_nt_contiguous", (a, b, d, grouped_layout),
                     dict(disable_ue8m0_cast=disable_ue8m0_cast))
        assert self.alignment == 128 and grouped_layout.dtype == torch.int32
        _check_mn_major(a[1], "sfa")
        for g in range(b[0].shape[0]):
            rows = (grouped_layout == g).nonzero().flatten()
            if len(rows):
                d[rows] = matmul_fp32(dequant_token(a[0][rows], a[1][rows]), dequant_block(b[0][g], b[1][g])).to(d.dtype)

    def m_grouped_fp8_gemm_nt_masked(self, a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims="nk", disable_ue8m0_cast=False):
        self._record("m_grouped_fp8_gemm_nt_masked", (a, b, d, masked_m, expected_m),
                     dict(disable_ue8m0_cast=disable_ue8m0_cast))
        _check_mn_major(a[1], "sfa")
        for g, m in enumerate(masked_m.tolist()):
            d[g, :m] = matmul_fp32(dequant_token(a[0][g, :m], a[1][g, :m]), dequant_block(b[0][g], b[1][g])).to(d.dtype)

    def k_grouped_fp8_gemm_nt_contiguous(self, a, b, d, ks_cpu, grouped_layout, c=None, recipe=(1, 1, 128),
                                         compiled_dims="mn", use_psum_layout=False):
        """DeepGEMM's own test's layout: A/B flat, the groups' [M, k_g] one after another; scales (M, Σk/128) with
        strides (1, M) (a contiguous [Σk/128, M] transposed); c is d; ks on the host and as an int32 tensor."""
        self._record("k_grouped_fp8_gemm_nt_contiguous", (a, b, d, ks_cpu, grouped_layout), dict(c=c, recipe=recipe))
        assert recipe == (1, 1, 128) and not use_psum_layout and isinstance(ks_cpu, list)
        assert c is not None and c.data_ptr() == d.data_ptr()
        assert grouped_layout.dtype == torch.int32 and grouped_layout.tolist() == ks_cpu
        groups, m, n = d.shape
        total = sum(ks_cpu)
        assert a[0].dim() == 1 and a[0].numel() == m * total and b[0].numel() == n * total
        for sf, rows in ((a[1], m), (b[1], n)):
            assert sf.shape == (rows, total // 128) and sf.stride() == (1, rows), sf.stride()
        off = 0
        for g, kg in enumerate(ks_cpu):
            ag = a[0][m * off:m * (off + kg)].view(m, kg)
            bg = b[0][n * off:n * (off + kg)].view(n, kg)
            kb = slice(off // 128, (off + kg) // 128)
            d[g] += matmul_fp32(dequant_token(ag, a[1][:, kb]), dequant_token(bg, b[1][:, kb]))
            off += kg

    # ---- MQA ---------------------------------------------------------------------------------------

    def fp8_fp4_mqa_logits(self, q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True,
                           max_seqlen_k=0, logits_dtype=torch.float32):
        self._record("fp8_fp4_mqa_logits", (q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end),
                     dict(clean_logits=clean_logits, max_seqlen_k=max_seqlen_k, logits_dtype=logits_dtype))
        q_fp, q_sf = q
        assert q_sf is None and q_fp.dtype == torch.float8_e4m3fn and logits_dtype == torch.float32
        return mqa_torch.prefill_logits(q_fp, kv[0], kv[1], weights, cu_seq_len_k_start, cu_seq_len_k_end)

    def get_paged_mqa_logits_metadata(self, context_lens, block_kv, num_sms, indices=None):
        self._record("get_paged_mqa_logits_metadata", (context_lens, block_kv, num_sms), {})
        assert context_lens.dim() == 2 and context_lens.dtype == torch.int32 and block_kv == 64
        return torch.zeros(num_sms + 1, 2, dtype=torch.int32)

    def fp8_fp4_paged_mqa_logits(self, q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                 max_context_len, clean_logits=False, logits_dtype=torch.float32, indices=None):
        self._record("fp8_fp4_paged_mqa_logits", (q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                                  max_context_len), dict(clean_logits=clean_logits))
        q_fp, q_sf = q
        batch, next_n = q_fp.shape[:2]
        assert q_sf is None and context_lens.shape == (batch, next_n) and context_lens.is_contiguous()
        assert int(block_table.min()) >= 0, "the stand-in reads every slot of the block table"
        lens = context_lens[:, -1]  # the last query of a sequence sees all of it
        out = mqa_torch.paged_logits(q_fp, kv_cache, weights, lens, block_table, lens.tolist(), max_context_len)
        # each query's own limit, from the [B, next_n] lengths: keys j >= lens[b, t] are -inf inside the blocks
        blocks = (lens + 63) // 64 * 64
        j = torch.arange(max_context_len)
        limit = context_lens.reshape(-1, 1).long()
        inside = j[None, :] < blocks.repeat_interleave(next_n)[:, None]
        return out.masked_fill((j[None, :] >= limit) & inside, float("-inf"))
