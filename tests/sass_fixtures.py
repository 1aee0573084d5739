"""Small CUDA kernels compiled to sm_90a cubins for the sass_tools tests, plus nvdisasm helpers.

Compiles with ``cuda.bindings.nvrtc`` directly (never through dgx), so the sass_tools tests stay
independent of the library. Everything is cached per process: each source compiles once.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass

ARCH = "sm_90a"


def nvdisasm_exe() -> str | None:
    """The nvdisasm the tests check against: $NVDISASM if set (to run them with another CUDA version's
    nvdisasm), else the one sass_tools finds."""
    import os

    from dgx.sass_tools import nvdisasm_path

    return os.environ.get("NVDISASM") or nvdisasm_path()


# --------------------------------------------------------------------------- kernel sources

# Long FFMA chains: 64 independent accumulators, the inner loop fully unrolled, so ptxas emits runs
# of dozens of back-to-back FFMA (the shape of the promotion code the pass targets).
FFMA_SRC = r"""
extern "C" __global__ void __launch_bounds__(128, 1)
ffma_chain(float* __restrict__ out, const float* __restrict__ in, int iters) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x + 32 * i];
  const float a = in[4096], b = in[4097];
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = fmaf(acc[i], a, b);
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  out[threadIdx.x] = s;
}
"""

# Every operand form of FFMA ptxas picks: R,R,R / R,imm,R / R,R,imm / R,UR,R / R,R,UR (the form is
# in bits 9..11 of the opcode field).
FFMA_FORMS_SRC = r"""
extern "C" __global__ void ffma_forms(float* __restrict__ out, const float* __restrict__ in, float s, int n) {
  const float a = in[0];
  float x = in[threadIdx.x], y = in[threadIdx.x + 256];
  for (int i = 0; i < n; ++i) {
    x = fmaf(x, a, y); y = fmaf(y, s, x); x = fmaf(x, 1.5f, y); y = fmaf(y, x, 2.5f); x = fmaf(a, x, s);
  }
  out[threadIdx.x] = x + y;
}
"""

# A register array indexed at run time cannot live in registers: ptxas puts it in local memory
# (a stack frame, LDL/STL in SASS).
LOCAL_SRC = r"""
extern "C" __global__ void local_array(float* __restrict__ out, const int* __restrict__ idx, int n) {
  float arr[256];
  for (int i = 0; i < 256; ++i) arr[i] = out[i * 7 % 256];
  for (int i = 0; i < n; ++i) arr[idx[i] & 255] += arr[idx[i + 1] & 255];
  out[threadIdx.x] = arr[idx[threadIdx.x] & 255];
}
"""

# Static shared memory and a CTA barrier (BAR.SYNC).
SMEM_SRC = r"""
extern "C" __global__ void smem_static(float* __restrict__ out) {
  __shared__ float buf[2048];
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) buf[i] = float(i);
  __syncthreads();
  out[threadIdx.x] = buf[2047 - threadIdx.x];
}
"""


# Many kinds of instruction in one kernel (math, conversions, atomics, shuffles, mbarrier, TMA,
# setmaxnreg, ldmatrix/stmatrix, cluster barriers, calls to slow-path subroutines), to check the codec
# and the opcode table against nvdisasm on more than FFMA. It only has to compile.
ZOO_SRC = r"""
extern "C" __global__ void __launch_bounds__(256, 1)
zoo(float* out, const float* in, double* dd, int* ii, unsigned* uu, const __grid_constant__ unsigned long long tmap,
    int n) {
  __shared__ __align__(128) float sm[4096];
  __shared__ __align__(8) unsigned long long bar;
  int t = threadIdx.x;
  float x = in[t], y = in[t + 1];
  x = __expf(x) + __sinf(y) + rsqrtf(y) + sqrtf(x) + __fdividef(x, y) + log2f(y);
  double z = dd[t]; z = z * z + dd[t+1]; z = sqrt(z); dd[t] = z;
  int a = ii[t], b = ii[t+1];
  a = a / (b | 1) + a % (b | 3) + __popc(a) + __clz(b) + __brev(a) + (a >> (b & 31)) + min(a, b) + abs(b);
  unsigned u = uu[t]; u = __funnelshift_l(u, u+1, a) ^ __byte_perm(u, a, 0x4321);
  x += __shfl_xor_sync(0xffffffff, x, 1);
  a += __shfl_down_sync(0xffffffff, a, 2);
  unsigned ballot = __ballot_sync(0xffffffff, x > 0.f);
  a += __reduce_add_sync(0xffffffff, a);
  atomicAdd(out + (t & 7), x);
  atomicMax(ii + (t & 7), a);
  atomicCAS(ii + 9, a, b);
  sm[t] = x;
  __syncthreads();
  x = sm[(t * 17) & 4095];
  unsigned hh; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hh) : "f"(x), "f"(y));
  asm("fma.rn.f16x2 %0, %0, %0, %0;" : "+r"(hh));
  unsigned bb; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bb) : "f"(x), "f"(y));
  unsigned short hs; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hs) : "f"(x));
  float hf; asm("cvt.f32.f16 %0, %1;" : "=f"(hf) : "h"(hs));
  x += hf + (float)(hh ^ bb);
  x += (float)a + (float)z + (float)u + (float)ballot;
  int q = __float2int_rn(x) + (int)z;
  unsigned smaddr = (unsigned)__cvta_generic_to_shared(&bar);
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smaddr));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (t == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 4096;" :: "r"(smaddr));
    unsigned dst = (unsigned)__cvta_generic_to_shared(sm);
    asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      :: "r"(dst), "l"(&tmap), "r"(q), "r"(a), "r"(smaddr) : "memory");
  }
  asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               "@!p bra WAIT_%=;\n}\n" :: "r"(smaddr));
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  unsigned r0, r1, r2, r3;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"((unsigned)__cvta_generic_to_shared(sm + t * 4)));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
               :: "r"((unsigned)__cvta_generic_to_shared(sm + t * 8)), "r"(r0), "r"(r1), "r"(r2), "r"(r3));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (t == 0)
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&tmap), "r"(q), "r"(a), "r"((unsigned)__cvta_generic_to_shared(sm)) : "memory");
  asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;" ::: "memory");
  unsigned cid; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(cid));
  unsigned lane; asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  float mx = fmaxf(x, y) + fminf(x, y) + copysignf(x, y) + floorf(y) + truncf(x);
  out[t] = mx + (float)(r0 + r1 + r2 + r3 + cid + lane);
  if (x > 3.f) __trap();
  for (int i = 0; i < n; ++i) { if (out[i] > 2.f) break; out[i] *= 3.f; }
  __nanosleep(10);
  unsigned long long clk = clock64(); ii[0] = (int)clk;
  __threadfence();
}
"""


def _wgmma_kernel(name: str, instr: str, n_acc: int, promote: bool, threads: int = 128, imm: str = "1, 1") -> str:
    """A kernel issuing one wgmma per K step through inline PTX (descriptors come from parameters:
    the kernel only has to compile), optionally promoting the accumulators into FP32 registers with
    a per-step scale the way DeepGEMM's fine-grained FP8 GEMM does (FFMA runs after each wgmma).
    ``imm``: the immediates after scale-d (scale-a, scale-b; f16 also takes two transpose flags)."""
    acc_out = ", ".join(f'"+f"(d[{i}])' for i in range(n_acc))
    body_promote = (
        f"""
    const float s = scales[k];
#pragma unroll
    for (int i = 0; i < {n_acc}; ++i) {{ fin[i] = fmaf(d[i], s, fin[i]); d[i] = 0.f; }}"""
        if promote
        else ""
    )
    final = "fin" if promote else "d"
    return rf"""
extern "C" __global__ void __launch_bounds__({threads}, 1)
{name}(float* __restrict__ out, const unsigned long long* __restrict__ descs,
       const float* __restrict__ scales, int ksteps) {{
  float d[{n_acc}];
  float fin[{n_acc}];
#pragma unroll
  for (int i = 0; i < {n_acc}; ++i) {{ d[i] = 0.f; fin[i] = 0.f; }}
#pragma unroll 1
  for (int k = 0; k < ksteps; ++k) {{
    const unsigned long long da = descs[2 * k], db = descs[2 * k + 1];
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
      "{{\n.reg .pred p;\nsetp.ne.b32 p, %{n_acc + 2}, 0;\n"
      "{instr} {{{", ".join(f"%{i}" for i in range(n_acc))}}}, %{n_acc}, %{n_acc + 1}, p, {imm};\n}}\n"
      : {acc_out}
      : "l"(da), "l"(db), "r"(k));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");{body_promote}
  }}
#pragma unroll
  for (int i = 0; i < {n_acc}; ++i) out[threadIdx.x * {n_acc} + i] = {final}[i];
}}
"""


# e4m3 x e4m3 -> f32 (QGMMA in SASS) with promotion FFMA; f16 x f16 -> f32 (HGMMA in SASS).
WGMMA_FP8_SRC = _wgmma_kernel(
    "wgmma_fp8", "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", 32, promote=True
)
# The same promotion with 64 accumulators in a 384-thread block (three warpgroups, as in the GEMM with
# two math warpgroups): here ptxas 13.5 interleaves the FFMA run itself, yield on every other FFMA.
WGMMA_FP8_384_SRC = _wgmma_kernel(
    "wgmma_fp8_384", "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", 64, promote=True, threads=384
)
WGMMA_F16_SRC = _wgmma_kernel(
    "wgmma_f16", "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", 32, promote=False, imm="1, 1, 0, 0"
)

SOURCES: dict[str, str] = {
    "ffma": FFMA_SRC,
    "ffma_forms": FFMA_FORMS_SRC,
    "local": LOCAL_SRC,
    "smem": SMEM_SRC,
    "wgmma_fp8": WGMMA_FP8_SRC,
    "wgmma_fp8_384": WGMMA_FP8_384_SRC,
    "wgmma_f16": WGMMA_F16_SRC,
    "zoo": ZOO_SRC,
}
# One source holding several kernels, to test multi-kernel cubins.
SOURCES["multi"] = FFMA_SRC + LOCAL_SRC + SMEM_SRC

KERNELS: dict[str, list[str]] = {
    "ffma": ["ffma_chain"],
    "ffma_forms": ["ffma_forms"],
    "local": ["local_array"],
    "smem": ["smem_static"],
    "wgmma_fp8": ["wgmma_fp8"],
    "wgmma_fp8_384": ["wgmma_fp8_384"],
    "wgmma_f16": ["wgmma_f16"],
    "zoo": ["zoo"],
    "multi": ["ffma_chain", "local_array", "smem_static"],
}


# --------------------------------------------------------------------------- NVRTC


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    log: str  # NVRTC log, including ptxas -v resource lines


class NvrtcError(RuntimeError):
    pass


def _check(result, what: str) -> None:
    from cuda.bindings import nvrtc

    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcError(f"{what} failed: {result}")


@functools.cache
def compile_source(source: str, name: str = "kernel.cu") -> Compiled:
    """Compile CUDA C++ to an sm_90a cubin with ``--ptxas-options=-v``; return it with the log."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={ARCH}".encode(), b"--ptxas-options=-v", b"-std=c++17"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err_log, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(err_log, "nvrtcGetProgramLogSize")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcError(f"nvrtcCompileProgram failed: {err}\n{log_text}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
        return Compiled(bytes(cubin), log_text)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compiled(key: str) -> Compiled:
    return compile_source(SOURCES[key], f"{key}.cu")


def cubin(key: str) -> bytes:
    return compiled(key).cubin


@dataclass(frozen=True)
class PtxasResources:
    registers: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    smem: int


_FUNC_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def ptxas_resources(log: str) -> dict[str, PtxasResources]:
    """Parse ptxas -v lines ('Function properties for K', '... stack frame ...', 'Used N registers,
    ... M bytes smem') into per-kernel numbers."""
    out: dict[str, PtxasResources] = {}
    current = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        if m := _FUNC_RE.search(line):
            current = m.group(1)
            frame = (0, 0, 0)
        elif (m := _FRAME_RE.search(line)) and current:
            frame = tuple(int(x) for x in m.groups())
        elif (m := _USED_RE.search(line)) and current:
            out[current] = PtxasResources(
                registers=int(m.group(1)),
                stack_frame=frame[0],
                spill_stores=frame[1],
                spill_loads=frame[2],
                smem=int(m.group(2) or 0),
            )
            current = None
    return out


# --------------------------------------------------------------------------- nvdisasm


@dataclass(frozen=True)
class DisasmInstr:
    offset: int
    predicate: str  # '' or e.g. '@!P0'
    opcode: str  # full mnemonic with modifiers, e.g. 'FFMA.FTZ'
    operands: str
    low: int
    high: int

    @property
    def mnemonic(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def reuse_operands(self) -> list[int]:
        """Indices (in source-operand order, destination excluded) of operands printed '.reuse'."""
        ops = split_operands(self.operands)
        return [i for i, op in enumerate(ops) if ".reuse" in op]


def split_operands(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


_SECTION_RE = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")
_INSTR_RE = re.compile(
    r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]\s+)?([A-Z][A-Za-z0-9_.]*)\s*([^;]*);\s*/\*\s*(0x[0-9a-f]{16})\s*\*/"
)
_HIGH_RE = re.compile(r"^\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$")


def parse_nvdisasm_hex(text: str) -> dict[str, list[DisasmInstr]]:
    """Parse ``nvdisasm -c -hex`` output into instructions per kernel (by .text section name)."""
    kernels: dict[str, list[DisasmInstr]] = {}
    current: list[DisasmInstr] | None = None
    pending = None
    for line in text.splitlines():
        if m := _SECTION_RE.match(line):
            current = kernels.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        if m := _INSTR_RE.match(line):
            pending = m
            continue
        if pending is not None and (h := _HIGH_RE.match(line)):
            m = pending
            current.append(
                DisasmInstr(
                    offset=int(m.group(1), 16),
                    predicate=(m.group(2) or "").strip(),
                    opcode=m.group(3),
                    operands=m.group(4).strip(),
                    low=int(m.group(5), 16),
                    high=int(h.group(1), 16),
                )
            )
            pending = None
    return kernels


@functools.lru_cache(maxsize=64)
def nvdisasm_text(cubin_bytes: bytes, *args: str) -> str:
    """nvdisasm's output for the bytes (written to a temporary file) with the given options."""
    import os
    import tempfile

    from dgx.sass_tools import nvdisasm_path

    exe = nvdisasm_exe()
    if exe is None:
        raise RuntimeError("nvdisasm not found")
    fd, path = tempfile.mkstemp(suffix=".cubin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin_bytes)
        res = subprocess.run([exe, *args, path], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        raise RuntimeError(f"nvdisasm {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def disasm_instructions(cubin_bytes: bytes) -> dict[str, list[DisasmInstr]]:
    return parse_nvdisasm_hex(nvdisasm_text(cubin_bytes, "-c", "-hex"))


@dataclass(frozen=True)
class DisasmInfoRecord:
    section: str
    offset: int
    name: str  # e.g. 'EIATTR_REGCOUNT' (nvdisasm says EIATTR_UNKNOWN for codes it has no name for)
    format: int
    attribute: int


_ANY_SECTION_RE = re.compile(r"^\s*\.section\s+(\S+?),")
_NVINFO_RE = re.compile(r"//----- nvinfo : (\w+)")
_BYTES_RE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+\.byte\s+0x([0-9a-f]{2}), 0x([0-9a-f]{2})")


def disasm_info_records(cubin_bytes: bytes) -> list[DisasmInfoRecord]:
    """The EIATTR records of every .nv.info section as nvdisasm lists them: the name it prints in
    '//----- nvinfo : NAME' and the first '.byte fmt, attr' line after it."""
    out = []
    section, pending = "", None
    for line in nvdisasm_text(cubin_bytes).splitlines():
        if m := _ANY_SECTION_RE.match(line):
            section, pending = m.group(1), None
        elif m := _NVINFO_RE.search(line):
            pending = m.group(1)
        elif pending and (m := _BYTES_RE.match(line)):
            out.append(
                DisasmInfoRecord(section, int(m.group(1), 16), pending, int(m.group(2), 16), int(m.group(3), 16))
            )
            pending = None
    return out


def _nvdisasm_missing() -> bool:
    from dgx.sass_tools import nvdisasm_path

    return nvdisasm_exe() is None


try:
    import pytest
except ImportError:  # run as a script (--opcodes) without pytest
    pytest = None

needs_nvdisasm = (
    pytest.mark.skipif(
        _nvdisasm_missing(),
        reason="nvdisasm is not installed (pip install nvidia-cuda-nvdisasm; it is in the test extra)",
    )
    if pytest is not None
    else None
)


# --------------------------------------------------------------------------- raw-instruction probing
#
# nvdisasm -b SM90a disassembles a raw instruction stream (no ELF). Illegal encodings are reported
# on stderr by address ("... at address 0x00000010"), which lets one call probe many words at once.

_RAW_LINE_RE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]\s+)?([A-Z0-9_.]+)([^;]*);")
_RAW_ERR_RE = re.compile(r"at address 0x([0-9a-f]+)")


def disasm_raw(words: list[tuple[int, int]]) -> list[str | None]:
    """Disassemble (low, high) 64-bit word pairs as sm_90a instructions: the text nvdisasm prints for
    each (e.g. 'FFMA R25, R25, R26, R27.reuse'), or None where nvdisasm calls the encoding illegal."""
    import os
    import struct
    import tempfile

    from dgx.sass_tools import nvdisasm_path

    exe = nvdisasm_exe()
    result: list[str | None] = [None] * len(words)
    todo = list(range(len(words)))
    for _ in range(8):
        if not todo:
            break
        fd, path = tempfile.mkstemp(suffix=".bin")
        try:
            os.write(fd, b"".join(struct.pack("<QQ", *words[i]) for i in todo))
            os.close(fd)
            res = subprocess.run([exe, "-b", "SM90a", path], capture_output=True, text=True, timeout=120)
        finally:
            os.unlink(path)
        if res.returncode == 0:
            for m in _RAW_LINE_RE.finditer(res.stdout):
                result[todo[int(m.group(1), 16) // 16]] = f"{m.group(3)}{m.group(4).rstrip()}"
            return result
        bad = {int(a, 16) // 16 for a in _RAW_ERR_RE.findall(res.stderr)}
        if not bad:
            raise RuntimeError(f"nvdisasm -b SM90a failed: {res.stderr.strip()[:500]}")
        todo = [i for k, i in enumerate(todo) if k not in bad]
    return result


_NOP_HIGH = 0x000FC00000000000  # control word of the padding NOPs ptxas emits (stall 0, yield)


def derive_opcode_table(cubins: list[bytes]) -> dict[int, str]:
    """Map the 12-bit opcode field (bits 0..11) to nvdisasm's mnemonic, from two probes:

    1. every opcode value 0..4095 with all other fields zero (predicate PT, NOP's control word);
    2. for each opcode seen in the given cubins, one real instruction of it with bits 9..11 set to
       each of their 8 values (those bits select the operand form: FFMA R,R,R is 0x223, FFMA R,UR,R
       0xc23, ...).

    Raises if one opcode value ever disassembles to two mnemonics.
    Used to write sass_tools/opcodes.py (python tests/sass_fixtures.py --opcodes).
    """
    table: dict[int, set[str]] = {}
    words = [(op | 0x7000, _NOP_HIGH) for op in range(4096)]
    for op, text in enumerate(disasm_raw(words)):
        if text:
            table.setdefault(op, set()).add(text.split()[0].split(".")[0])
    exemplars: dict[int, DisasmInstr] = {}
    for blob in cubins:
        for instrs in disasm_instructions(blob).values():
            for ins in instrs:
                exemplars.setdefault(ins.low & 0xFFF, ins)
    words, ops = [], []
    for op, ins in exemplars.items():
        for form in range(8):
            words.append(((ins.low & ~0xE00) | (form << 9), ins.high))
            ops.append((op & 0x1FF) | (form << 9))
    for op, text in zip(ops, disasm_raw(words)):
        if text:
            table.setdefault(op, set()).add(text.split()[0].split(".")[0])
    clashes = {hex(k): v for k, v in table.items() if len(v) > 1}
    if clashes:
        raise RuntimeError(f"opcode values with more than one mnemonic: {clashes}")
    return {op: names.pop() for op, names in sorted(table.items())}


def all_fixture_cubins() -> list[bytes]:
    return [cubin(k) for k in SOURCES]


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    if sys.argv[1:] == ["--opcodes"]:
        by_name: dict[str, list[int]] = {}
        for op, name in derive_opcode_table(all_fixture_cubins()).items():
            by_name.setdefault(name, []).append(op)
        for name in sorted(by_name):
            print(f'    "{name}": ({"".join(f"0x{o:03x}, " for o in by_name[name]).rstrip()}),')
    else:
        print("usage: python tests/sass_fixtures.py --opcodes")
