"""Programmatic dependent launch on the CPU: the switch, the launch attribute it adds (and only then), cached plans
following a toggle, and the griddepcontrol instructions in the compiled kernels (before every global access)."""

from __future__ import annotations

import re

import pytest

import dgx
from dgx import ptx
from dgx import compiler, pdl, runtime
from dgx.sass_tools import Cubin, decode, disassemble
from dgx.sass_tools.opcodes import mnemonic

from test_launcher_cpu import FakeDriver

CLUSTER = runtime.LaunchShape(grid=(66, 1, 1), block=(384, 1, 1), cluster=(2, 1, 1), dynamic_smem=200_000)
SINGLE = runtime.LaunchShape(grid=(132, 1, 1), block=(256, 1, 1))


@pytest.fixture(autouse=True)
def pdl_restored():
    before = dgx.get_pdl()
    yield
    dgx.set_pdl(before)


def _launcher(shape: runtime.LaunchShape, drv: FakeDriver, waits: bool = True) -> runtime.Launcher:
    kernel = runtime.LoadedKernel("dgx_fake_kernel", object(), object(), 0, shape.dynamic_smem, waits)
    launcher = runtime.Launcher(kernel, shape)
    launcher._drv = drv
    return launcher


def _attributes(config) -> dict[str, object]:
    """The launch attributes of a CUlaunchConfig, by name: cluster dims as a tuple, PDL as its value."""
    drv = runtime._driver()
    ids = drv.CUlaunchAttributeID
    out = {}
    for attr in list(config.attrs)[: config.numAttrs]:
        if attr.id == ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            dim = attr.value.clusterDim
            out["cluster"] = (dim.x, dim.y, dim.z)
        elif attr.id == ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            out["pdl"] = attr.value.programmaticStreamSerializationAllowed
        else:
            out[str(attr.id)] = None
    return out


def test_switch_is_off_by_default_and_exported():
    import subprocess
    import sys

    fresh = subprocess.run([sys.executable, "-c", "import dgx; print(dgx.get_pdl())"], capture_output=True, text=True,
                           timeout=60)
    assert fresh.stdout.strip() == "False", fresh.stderr  # a new process's default, whatever earlier tests set
    assert dgx.set_pdl is pdl.set_pdl and dgx.get_pdl is pdl.get_pdl
    assert {"set_pdl", "get_pdl"} <= set(dgx.__all__)
    dgx.set_pdl(1)
    assert dgx.get_pdl() is True
    dgx.set_pdl(0)
    assert dgx.get_pdl() is False


@pytest.mark.parametrize("shape", [CLUSTER, SINGLE], ids=["cluster", "single"])
def test_attribute_present_iff_pdl(shape):
    drv = FakeDriver()
    launcher = _launcher(shape, drv)
    params = runtime.ParamPack([("u64", 0)])
    cluster = {"cluster": shape.cluster} if shape.cluster != (1, 1, 1) else {}
    dgx.set_pdl(False)
    launcher.launch(0x7, params)
    dgx.set_pdl(True)
    launcher.launch(0x7, params)
    dgx.set_pdl(False)
    launcher.launch(0x7, params)
    (_, off, s0, _), (_, on, s1, _), (_, off_again, s2, _) = drv.calls
    assert s0 == s1 == s2 == 0x7
    assert _attributes(off) == cluster  # nothing added with PDL off
    assert _attributes(on) == {**cluster, "pdl": 1}  # with the cluster dims where the kernel has them
    assert off_again is off  # each config made once and kept: toggling back costs nothing
    for config in (off, on):
        assert (config.gridDimX, config.gridDimY, config.gridDimZ) == shape.grid
        assert (config.blockDimX, config.blockDimY, config.blockDimZ) == shape.block
        assert config.sharedMemBytes == shape.dynamic_smem


def test_kernel_that_never_waits_is_never_launched_early():
    drv = FakeDriver()
    launcher = _launcher(CLUSTER, drv, waits=False)
    dgx.set_pdl(True)
    launcher.launch(0x7, runtime.ParamPack([("u64", 0)]))
    assert _attributes(drv.calls[-1][1]) == {"cluster": CLUSTER.cluster}


def test_pdl_configs_per_stream_cached_and_bounded():
    drv = FakeDriver()
    launcher = _launcher(CLUSTER, drv)
    params = runtime.ParamPack([("u64", 0)])
    dgx.set_pdl(True)
    for stream in (0x10, 0x20, 0x10, 0):
        launcher.launch(stream, params)
    configs = {}
    for _, config, stream, _ in drv.calls:
        assert configs.setdefault(stream, config) is config
        assert _attributes(config).get("pdl") == 1
    assert sorted(configs) == [0, 0x10, 0x20]
    assert launcher.config_for(0x10) is configs[0x10]  # follows the switch
    assert launcher.config_for(0x10, pdl=False) is not configs[0x10]
    assert "pdl" not in _attributes(launcher.config_for(0x10, pdl=False))
    assert launcher.config_for(0, pdl=False) is launcher._config  # the occupancy queries' config has no PDL
    for stream in range(1, 3 * runtime.MAX_STREAM_CONFIGS):
        launcher.launch(stream, params)
    assert len(launcher._pdl_configs) <= runtime.MAX_STREAM_CONFIGS
    assert all(_attributes(c).get("pdl") == 1 for _, c, _, _ in drv.calls)


def test_cached_gemm_plan_follows_a_toggle(monkeypatch):
    """The real plan path (launch.plan, its plan cache and the per-call fast path) with the kernel load and the
    driver stood in for: a toggle of set_pdl applies to the next call of an already planned, cached GEMM."""
    torch = pytest.importorskip("torch")
    from dgx import checks, gemm, jit, launch, tensors

    drv = FakeDriver()
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    monkeypatch.setattr(checks, "require_cuda", lambda *a, **k: None)
    monkeypatch.setattr(tensors, "require_cuda", lambda *a, **k: None)
    monkeypatch.setattr(launch, "get_num_sms", lambda device: 132)
    monkeypatch.setattr(runtime, "max_active_clusters", lambda kernel, shape: 66)
    monkeypatch.setattr(jit, "get_kernel", lambda src, device: runtime.LoadedKernel(src.name, object(), object(),
                                                                                    device, src.dynamic_smem, True))
    monkeypatch.setattr(launch, "pack_operands", lambda config, ops: runtime.ParamPack([("u64", 0)]))
    monkeypatch.setattr(gemm, "resolve_stream", lambda stream, device: 0x30)
    for cache in ("_plans", "_params"):
        monkeypatch.setattr(launch, cache, {})
    monkeypatch.setattr(gemm, "_entries", {})

    m, n, k = 64, 2112, 7168
    a = (torch.empty(m, k, dtype=torch.float8_e4m3fn), torch.empty(k // 128, m).t())
    b = (torch.empty(n, k, dtype=torch.float8_e4m3fn), torch.empty(-(-n // 128), k // 128))
    d = torch.empty(m, n, dtype=torch.bfloat16)
    seen = []
    for flag in (False, True, True, False, True):
        dgx.set_pdl(flag)
        gemm.fp8_gemm_nt(a, b, d)
        seen.append("pdl" in _attributes(drv.calls[-1][1]))
    assert seen == [False, True, True, False, True]
    assert len(launch._plans) == 1  # one plan, reused: the launcher (and the fast path) read the switch


# --- the kernels: griddepcontrol in the PTX, and before every global access in the SASS --------------------------

# Global memory instructions (SASS): loads, stores (generic ones too), atomics and reductions, TMA and bulk copies.
# UTMACCTL (the tensor-map prefetch) is left out: the maps are kernel parameters, prefetched before the wait on purpose.
_GLOBAL = {"LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED", "REDG", "UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF",
           "UBLKCP", "UBLKRED", "UBLKPF", "LDGSTS"}
_LABEL = re.compile(r"^\s*([.$\w]+):\s*$")
_INSTR = re.compile(r"/\*[0-9a-f]+\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"`\((.*?)\)")


def _global_access_before_wait(sass: str, kernel: str) -> list[str]:
    """The global-memory instructions some path from the kernel's entry reaches without passing an ACQBULK
    (griddepcontrol.wait), following nvdisasm's listing: fall-through, branch and call targets, returns and exits."""
    labels, code = {}, []
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = len(code)
            continue
        m = _INSTR.search(line)
        if m:
            code.append(m.group(1))
    found, seen, todo = set(), set(), [labels[kernel]]
    while todo:
        i = todo.pop()
        if i in seen or i >= len(code):
            continue
        seen.add(i)
        text = code[i]
        tokens = text.split()
        guarded = tokens[0].startswith("@")
        if guarded:
            tokens = tokens[1:]
        op = tokens[0].split(".")[0]
        if op == "ACQBULK":
            continue  # every path on from here has waited
        if op in _GLOBAL:
            found.add(text)
        target = _TARGET.search(text)
        if op in ("BRA", "CALL", "JMP") and target:
            todo.append(labels[target.group(1)])
        elif op in ("BRX", "JMX"):
            todo.extend(labels.values())  # an indirect branch: anywhere
        if op in ("EXIT", "RET"):
            ends = not guarded
        elif op in ("BRA", "JMP"):  # a plain BRA `(target); BRA P1, ... and BRA.DIV ... are conditional
            ends = not guarded and tokens[0] == op and tokens[1].startswith("`")
        else:
            ends = False
        if not ends:
            todo.append(i + 1)
    return sorted(found)


def _kernels():
    from dgx.heuristics import choose_dense, choose_grouped, choose_wgrad
    from dgx.kernels.fp8_gemm import (
        LAYOUT_CONTIGUOUS,
        LAYOUT_CONTIGUOUS_PSUM,
        LAYOUT_K_GROUPED,
        LAYOUT_MASKED,
        GemmConfig,
    )
    from dgx.kernels.mqa_logits import MqaCleanConfig, PagedScheduleConfig, paged_config, prefill_config
    from dgx.kernels.scale_layout import ScaleTransposeConfig
    from dgx.kernels.silu_mul_quant import SiluMulQuantConfig
    from dgx.kernels.smoke import SmokeConfig
    from dgx.kernels.ue8m0 import Ue8m0UnpackConfig

    return [
        ("dense decode", choose_dense(64, 4096, 7168, 132).config),
        ("masked", choose_grouped(LAYOUT_MASKED, 64, 4096, 7168, 8, 132).config),  # masked_m read by the schedulers
        ("contiguous pair", choose_grouped(LAYOUT_CONTIGUOUS, 32768, 4096, 7168, 8, 132).config),  # m_indices, cluster
        ("split-K", GemmConfig(n=2112, k=7168, block_m=64, block_n=128, stages=7, split_k=7)),  # a cluster of 7
        ("prefix sums", GemmConfig(n=4096, k=7168, block_m=128, block_n=128, stages=5, layout=LAYOUT_CONTIGUOUS_PSUM)),
        ("k-grouped", choose_wgrad(4096, 7168, 2048, 132, LAYOUT_K_GROUPED, 8).config),  # ks, maps in global memory
        ("prefill mqa", prefill_config(64, 128, False, False)),
        ("paged mqa", paged_config(64, 128, 1, False)),
        ("clean", MqaCleanConfig(True, False, False, 1)),
        ("schedule", PagedScheduleConfig()),
        ("smoke", SmokeConfig()),
        ("ue8m0 unpack", Ue8m0UnpackConfig()),
        ("scale layout", ScaleTransposeConfig()),
        ("silu_mul_quant", SiluMulQuantConfig(True, "packed_ue8m0", 4)),  # masked_m, x, y and the scales
    ]


@pytest.mark.parametrize("label, config", _kernels(), ids=[k[0] for k in _kernels()])
def test_kernels_wait_before_any_global_access(label, config):
    src = config.render()
    result = compiler.compile_cubin(src.source, src.name, compiler.compile_options("sm_90a"), want_ptx=True)
    assert result.ptx.count("griddepcontrol.wait;") == 1
    assert result.ptx.count("griddepcontrol.launch_dependents;") == 1
    ops = [mnemonic(i.opcode) for i in decode(Cubin(result.cubin).text(src.name))]
    assert ops.count("ACQBULK") == 1 and ops.count("PREEXIT") == 1, "griddepcontrol.wait / launch_dependents"
    sass = disassemble(result.cubin)
    assert any(op in sass for op in ("LDG", "UTMALDG", "STG")), "the listing shows no global access at all"
    early = _global_access_before_wait(sass, src.name)
    assert not early, f"{label}: global memory reached before griddepcontrol.wait: {early[:5]}"
    assert runtime.waits_for_predecessor(result.cubin, src.name)  # so the launcher adds the attribute


def test_a_kernel_without_the_wait_is_recognised():
    source = 'extern "C" __global__ void dgx_plain(float* p) { p[threadIdx.x] = 1.0f; }\n'
    result = compiler.compile_cubin(source, "dgx_plain", compiler.compile_options("sm_90a"))
    assert not runtime.waits_for_predecessor(result.cubin, "dgx_plain")


def test_headers_hold_the_wrappers():
    # The kernel cache key hashes every header (dgx.jit.key_inputs), so adding the instructions changed every key.
    headers = ptx.headers()
    assert b"griddepcontrol.wait" in headers["pdl.cuh"]
    for name in ("fp8_gemm.cuh", "mqa_logits.cuh", "smoke.cuh"):
        assert b'#include "pdl.cuh"' in headers[name]
