"""The FP8 GEMM's fused epilogues (ptx/fp8_gemm_fused.cuh): one frozen description, rendered into the kernel's
source, name and cache key from here, and the extra kernel parameters they read."""

from __future__ import annotations

from dataclasses import dataclass

from .interface import Param

#: Output scale formats: FP32, FP32 holding powers of two (UE8M0 values), UE8M0 bytes packed four to an int32.
SCALE_FORMATS = ("fp32", "ue8m0", "packed")
#: Output channels per scale (per row): the quantisation group the next FP8 GEMM reads as its A's 1 x 128 scales.
GROUP = 128

#: Kernel parameters of the fused kernels, after the plain FP8 GEMM's: `sf_out` the output scales, `ld_sf` the
#: elements (floats, or int32 words when packed) between two columns of them, `sf_group_stride` between two masked
#: groups' scales; `row_weight` FP32 per output row; `alpha` and `swiglu_limit` run-time scalars.
FUSED_PARAMS = (
    Param("sf_out", "void*", default=0),
    Param("ld_sf", "long long", default=0),
    Param("sf_group_stride", "long long", default=0),
    Param("row_weight", "const float*", default=0),
    Param("alpha", "float", default=1.0),
    Param("swiglu_limit", "float", default=0.0),
)


@dataclass(frozen=True)
class Epilogue:
    """What a fused FP8 GEMM kernel does with its FP32 results (a GemmConfig field; None is the plain BF16 store).

    fp8: FP8 e4m3 output quantised per row per 128 output channels, with scales in `scale_format`;
    else BF16 output (with `alpha` only). swiglu: silu(gate) * up of B's gate/up units (dgx.prepare_gate_up),
    clamp: with swiglu_limit; row_weight: times a per-row FP32 weight; alpha: times a run-time scalar."""

    fp8: bool = True
    swiglu: bool = False
    clamp: bool = False
    row_weight: bool = False
    alpha: bool = False
    scale_format: str = "fp32"

    def __post_init__(self) -> None:
        for name in ("fp8", "swiglu", "clamp", "row_weight", "alpha"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Epilogue.{name}: expected a bool; got {getattr(self, name)!r}")
        problem = ""
        if self.scale_format not in SCALE_FORMATS:
            problem = f"scale_format must be one of {SCALE_FORMATS}; got {self.scale_format!r}"
        elif not self.fp8 and (self.swiglu or self.row_weight):
            problem = "swiglu and row_weight need the FP8 output (d as a (d_fp8, d_sf) pair)"
        elif not self.fp8 and not self.alpha:
            problem = "a BF16-output epilogue without alpha is the plain kernel (epilogue None)"
        elif not self.fp8 and self.scale_format != "fp32":
            problem = "a BF16 output has no scales (scale_format 'fp32')"
        elif self.clamp and not self.swiglu:
            problem = "clamp (swiglu_limit) is for swiglu"
        if problem:
            raise ValueError(f"invalid Epilogue {self}: {problem}")

    @property
    def tag(self) -> str:
        """Short name for kernel names: e.g. 'fp8', 'fp8_swiglu_clamp_rw_alpha_ue8m0', 'bf16_alpha'."""
        parts = ["fp8" if self.fp8 else "bf16"]
        parts += [name for name, on in (("swiglu", self.swiglu), ("clamp", self.clamp), ("rw", self.row_weight),
                                        ("alpha", self.alpha)) if on]
        if self.fp8 and self.scale_format != "fp32":
            parts.append(self.scale_format)
        return "_".join(parts)

    @property
    def out_cols_divisor(self) -> int:
        """N per output column: 2 for SwiGLU (gate and up), else 1."""
        return 2 if self.swiglu else 1

    @property
    def n_multiple(self) -> int:
        """What N must be a multiple of: whole 128-channel groups (SwiGLU: whole units of 128 gate + 128 up)."""
        return 2 * GROUP if self.swiglu else GROUP if self.fp8 else 8

    def render(self) -> str:
        """The C++ type of the epilogue (the traits' last template argument)."""
        b = lambda v: "true" if v else "false"  # noqa: E731
        return (f"dgx::FusedEpilogue<{b(self.fp8)}, {b(self.swiglu)}, {b(self.clamp)}, {b(self.row_weight)}, "
                f"{b(self.alpha)}, {SCALE_FORMATS.index(self.scale_format)}>")

    def smem_d_bytes(self, block_m: int, block_n: int) -> int:
        """Shared memory of the output (FusedEpilogue::smem_d_bytes): the FP8 tile and SwiGLU's FP32 stash."""
        if not self.fp8:
            return block_m * block_n * 2
        return block_m * GROUP + (block_m * GROUP * 4 if self.swiglu else 0)

    def validate_tile(self, block_m: int, block_n: int, n: int) -> str:
        """'' if a kernel of this tile and N can run the epilogue, else what is wrong."""
        if self.fp8 and block_n != GROUP:
            return f"an FP8-output epilogue needs block_n {GROUP} (a tile is one quantisation group); got {block_n}"
        if self.fp8 and block_m > 128:
            # 256-row tiles hold two m64 slices of results a thread; quantising them spilled (144 bytes of local
            # memory at ptxas' 168-register bound), and SwiGLU's stash would leave no room for stages.
            return f"FP8-output epilogues need block_m 64 or 128; got {block_m}"
        if n % self.n_multiple:
            what = "whole gate/up units of 256 rows" if self.swiglu else "whole 128-channel groups"
            return f"N = {n} must be a multiple of {self.n_multiple} ({what}) for the {self.tag} epilogue"
        return ""


def parse_epilogue(text: str) -> Epilogue:
    """An Epilogue from its tag ('fp8', 'fp8_swiglu_ue8m0', 'bf16_alpha', ...): what shapes files and
    ``dgx inspect --epilogue`` give. Raises ValueError naming what it expected."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"epilogue: expected a tag such as 'fp8', 'fp8_swiglu', 'fp8_swiglu_clamp_rw_ue8m0' or "
                         f"'bf16_alpha'; got {text!r}")
    parts = text.split("_")
    head, rest = parts[0], parts[1:]
    if head not in ("fp8", "bf16"):
        raise ValueError(f"epilogue {text!r}: expected it to start with 'fp8' or 'bf16'")
    known = {"swiglu", "clamp", "rw", "alpha", "ue8m0", "packed"}
    unknown = [p for p in rest if p not in known]
    if unknown or len(set(rest)) != len(rest):
        raise ValueError(f"epilogue {text!r}: unknown or repeated parts {unknown or rest}; expected some of "
                         f"{sorted(known)} after 'fp8' or 'bf16'")
    fmt = "packed" if "packed" in rest else "ue8m0" if "ue8m0" in rest else "fp32"
    if "packed" in rest and "ue8m0" in rest:
        raise ValueError(f"epilogue {text!r}: 'ue8m0' and 'packed' exclude each other")
    return Epilogue(fp8=head == "fp8", swiglu="swiglu" in rest, clamp="clamp" in rest, row_weight="rw" in rest,
                    alpha="alpha" in rest, scale_format=fmt)
