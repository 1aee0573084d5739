"""Renders the wgmma.mma_async wrappers for one N: their asm lists N/2 accumulator registers, which C++
cannot spell generically, so Python writes the specialisations of dgx::WgmmaE4M3<N> (ptx/wgmma.cuh) and
dgx::WgmmaBF16<N, ...> (ptx/bf16_gemm_traits.cuh)."""

from __future__ import annotations


def render_wgmma_e4m3(n: int) -> str:
    """C++ source of ``template <> struct dgx::WgmmaE4M3<n>``: m64nNk32, e4m3 x e4m3 -> f32, operands
    from shared-memory descriptors; `accumulate` false overwrites the accumulators."""
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma e4m3 takes N in 8..256, a multiple of 8; got {n}")
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (
        "namespace dgx {\n"
        f"template <> struct WgmmaE4M3<{n}> {{\n"
        f"  DGX_DEVICE static void mma(uint64_t desc_a, uint64_t desc_b, float (&d)[{regs}], bool accumulate) {{\n"
        "    asm volatile(\n"
        '        "{\\n.reg .pred p;\\n"\n'
        f'        "setp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1;\\n}}\\n"\n'
        f"        : {binds}\n"
        '        : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));\n'
        "  }\n"
        "};\n"
        "}  // namespace dgx\n"
    )


def render_wgmma_bf16(n: int, trans_a: bool, trans_b: bool) -> str:
    """C++ source of ``template <> struct dgx::WgmmaBF16<n, trans_a, trans_b>`` (ptx/bf16_gemm_traits.cuh):
    m64nNk16, bf16 x bf16 -> f32, operands from shared-memory descriptors, `trans_a` / `trans_b` the instruction's
    transpose flags (the operand is M- / N-major in shared memory); `accumulate` false overwrites the
    accumulators."""
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma bf16 takes N in 8..256, a multiple of 8; got {n}")
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    ta, tb = int(bool(trans_a)), int(bool(trans_b))
    return (
        "namespace dgx {\n"
        f"template <> struct WgmmaBF16<{n}, {'true' if ta else 'false'}, {'true' if tb else 'false'}> {{\n"
        f"  DGX_DEVICE static void mma(uint64_t desc_a, uint64_t desc_b, float (&d)[{regs}], bool accumulate) {{\n"
        "    asm volatile(\n"
        '        "{\\n.reg .pred p;\\n"\n'
        f'        "setp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1, '
        f'{ta}, {tb};\\n}}\\n"\n'
        f"        : {binds}\n"
        '        : "l"(desc_a), "l"(desc_b), "r"(static_cast<uint32_t>(accumulate)));\n'
        "  }\n"
        "};\n"
        "}  // namespace dgx\n"
    )
