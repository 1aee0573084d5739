"""The standalone SwiGLU + FP8 quantisation kernel (ptx/silu_mul_quant.cuh): config, rendering, heuristic, launch.

    h = silu(min(gate, L)) * clamp(up, -L, L)   (FP32; no clamp without a limit)
    y = FP8(h / sf) per row and 128 channels,   sf = max(amax |h|, 1e-4) / 448 (UE8M0: a power of two)

for x BF16 [rows, 2I] (gate first, then up), one group or G groups of masked rows. Shapes are run-time arguments:
a kernel serves every I and M, so a config is only the compile-time variant (clamp, scale layout), how many
units a half-warp loads at once, and whether silu takes the fast forms (ex2.approx, rcp.approx: the library's
kernels) or the precise ones (expf, IEEE division: kept for device A/B runs, never picked by the heuristic).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import jit, runtime
from ..intmath import ceil_div
from .interface import KernelInterface, Param
from .. import caches

BLOCK = 128  # channels per scale (the FP8 GEMM's per-token 1 x 128 scaling)
SCALE_MODES = ("fp32", "ue8m0", "packed_ue8m0")  # ptx/silu_mul_quant.cuh SmqScaleMode, in order
UNROLLS = (1, 2, 4)  # what the heuristic picks (and warm-up builds)
AB_UNROLLS = UNROLLS + (8,)  # what a config may hold: 8 only for device A/B runs
THREADS = 256
MAX_GROUPS = 65535  # grid y
#: The `dgx warmup` entry that builds every variant (a strict-mode miss names it).
WARMUP_HINT = 'a warmup entry {"kind": "silu_mul_quant"} (every variant; "scales" and "clamp" narrow it)'

INTERFACE = KernelInterface(
    "SiluMulQuantParams",
    (
        Param("x", "const uint16_t*"),  # BF16 [G][rows][2I]
        Param("y", "uint8_t*"),  # FP8 [G][rows][I]
        Param("sf", "float*"),  # FP32 or packed int32 scales, M-major per group
        Param("masked_m", "const int*"),  # int32 [G], or null: every row
        Param("x_row", "long long"),  # elements between rows of x
        Param("x_group", "long long"),
        Param("y_row", "long long"),
        Param("y_group", "long long"),
        Param("sf_ld", "long long"),  # 4-byte words between a group's k-blocks (packed: words of 4 k-blocks)
        Param("sf_group", "long long"),
        Param("rows", "int"),  # M, or the masked layout's rows per group (Mmax)
        Param("blocks", "int"),  # I / 128
        Param("limit", "float", 0.0),  # swiglu_limit (read only by clamping kernels)
    ),
)


@dataclass(frozen=True)
class SiluMulQuantConfig:
    """Everything compile-time about one silu_mul_quant kernel: whether it clamps (a swiglu_limit), the scales'
    layout (one of SCALE_MODES), the units (row x 128 channels) each half-warp loads before its math, and whether
    silu takes the fast forms (the default; False: expf and IEEE division, for A/B runs only)."""

    clamp: bool = False
    scale_mode: str = "fp32"
    unroll: int = 4
    threads: int = THREADS
    fast_silu: bool = True

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.clamp, bool):
            problems.append("clamp must be a bool")
        if self.scale_mode not in SCALE_MODES:
            problems.append(f"scale_mode must be one of {SCALE_MODES}")
        if self.unroll not in AB_UNROLLS:
            problems.append(f"unroll must be one of {AB_UNROLLS}")
        if self.threads not in (128, 256, 512):
            problems.append("threads must be 128, 256 or 512")
        if not isinstance(self.fast_silu, bool):
            problems.append("fast_silu must be a bool")
        if problems:
            raise ValueError(f"invalid silu_mul_quant config {self}: {'; '.join(problems)}")

    @property
    def units_per_cta(self) -> int:
        return self.threads // 16 * self.unroll

    def grid(self, rows: int, blocks: int, groups: int) -> tuple[int, int, int]:
        return (max(1, ceil_div(rows * blocks, self.units_per_cta)), groups, 1)

    @property
    def kernel_name(self) -> str:
        return (f"dgx_silu_mul_quant_{self.scale_mode}{'_clamp' if self.clamp else ''}_u{self.unroll}"
                f"_w{self.threads}{'' if self.fast_silu else '_precise'}")

    def describe(self) -> tuple[tuple[str, str], ...]:
        return jit.config_summary("silu_mul_quant", self)

    def render(self) -> jit.KernelSource:
        return _render(self)


@lru_cache(maxsize=None)
def _render(config: SiluMulQuantConfig) -> jit.KernelSource:
    mode = SCALE_MODES.index(config.scale_mode)
    flag = {True: "true", False: "false"}
    traits = f"dgx::SmqTraits<{config.threads}, {config.unroll}, {flag[config.clamp]}, {mode}, {flag[config.fast_silu]}>"
    source = ('#include "silu_mul_quant.cuh"\n'
              + INTERFACE.render_entry(config.kernel_name, config.threads, f"dgx::silu_mul_quant_body<{traits}>")
              + f'static_assert({traits}::kUnitsPerCta == {config.units_per_cta}, "units per CTA");\n')
    return jit.KernelSource(name=config.kernel_name, source=source, summary=config.describe(),
                            warmup_hint=WARMUP_HINT)


# Units (row x 128 channels) per SM up to which a smaller unroll would win. Measured (H200, tests/device/smq_ab.py, 13
# masked and contiguous cases from 1024 to 65536 rows): one unit a half-warp was the fastest on every case, 94-100% of
# the read floor with the fast SiLU; two and four units ran 1.7-5.6% slower. So one unit everywhere; the wider unrolls
# stay valid configs for A/Bs.
ONE_UNIT_UP_TO = float("inf")
TWO_UNITS_UP_TO = float("inf")


def choose_config(rows: int, blocks: int, groups: int, num_sms: int, clamp: bool = False,
                  scale_mode: str = "fp32") -> SiluMulQuantConfig:
    """The unroll by the units an SM would get: one (small problems: one wave, spread over every SM), two, or four
    (large problems: bytes in flight). Decided by the host-known shape (the masked layout's rows per group, the grid
    it launches), never by counts the GPU holds, so a captured graph keeps its kernel."""
    if rows < 0 or blocks <= 0 or groups <= 0 or num_sms <= 0:
        raise ValueError(f"choose_config needs rows >= 0 and positive blocks, groups, SMs; got {rows}, {blocks}, "
                         f"{groups}, {num_sms}")
    per_sm = rows * blocks * groups / num_sms
    unroll = 1 if per_sm <= ONE_UNIT_UP_TO else 2 if per_sm <= TWO_UNITS_UP_TO else 4
    return SiluMulQuantConfig(clamp, scale_mode, unroll)


def chosen_unrolls() -> tuple[int, ...]:
    """The unrolls choose_config can return (its thresholds decide which)."""
    return tuple(u for u, reachable in ((1, True), (2, ONE_UNIT_UP_TO < TWO_UNITS_UP_TO),
                                         (4, TWO_UNITS_UP_TO != float("inf"))) if reachable)


def warmup_configs(clamps=(False, True), scale_modes=SCALE_MODES) -> list[SiluMulQuantConfig]:
    """Every kernel a call can pick for these variants (shape-independent)."""
    return [SiluMulQuantConfig(c, m, u) for c in clamps for m in scale_modes for u in chosen_unrolls()]


_launchers: dict[tuple, runtime.Launcher] = caches.per_process({})


def launcher(config: SiluMulQuantConfig, device: int, grid: tuple[int, int, int]) -> runtime.Launcher:
    """The loaded kernel of `config` on `device` with `grid`."""
    key = (config, device, grid)
    found = _launchers.get(key)
    if found is None:
        kernel = jit.get_kernel(config.render(), device)
        found = runtime.Launcher(kernel, runtime.LaunchShape(grid, (config.threads, 1, 1)))
        if len(_launchers) >= 1024:
            _launchers.clear()
        _launchers[key] = found
    return found
