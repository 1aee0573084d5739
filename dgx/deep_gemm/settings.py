"""DeepGEMM's runtime settings on dgx: SM count, PDL, the contiguous layout's alignment, and the heuristic knobs dgx
stores but does not use on sm_90 (tensor-core utilisation, compile-dims, block-size multiples)."""

from __future__ import annotations

from .. import device as _device
from .. import runtime as _runtime
from ..heuristics import CONTIGUOUS_ALIGNMENT as _DGX_ALIGNMENT
from ..pdl import get_pdl, set_pdl

__all__ = [
    "set_num_sms",
    "get_num_sms",
    "set_tc_util",
    "get_tc_util",
    "set_pdl",
    "get_pdl",
    "set_ignore_compile_dims",
    "set_block_size_multiple_of",
    "set_mk_alignment_for_contiguous_layout",
    "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
]

_settings = {"tc_util": 0, "ignore_compile_dims": False, "block_size_multiple_of": (1, 1), "mk_alignment": 128}


def expect_int(value, name: str, low: int | None = None, high: int | None = None) -> int:
    """`value` if it is an int (not a bool) within [low, high]; else TypeError/ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int; got {type(value).__name__} {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an int {bounds}; got {value}")
    return value


def _current_device() -> int:
    import torch

    return torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else 0


def set_num_sms(new_num_sms: int) -> None:
    """Plan kernels for this many SMs (0: all of the device's, DeepGEMM's reset); as dgx.set_num_sms."""
    expect_int(new_num_sms, "new_num_sms", 0)
    if new_num_sms == 0:
        new_num_sms = _runtime.device_info(_current_device()).num_sms
    _device.set_num_sms(new_num_sms)


def get_num_sms() -> int:
    """The SMs kernels are planned for (set_num_sms, else DGX_NUM_SMS, else the current device's)."""
    return _device.get_num_sms(_current_device())


def set_tc_util(new_tc_util: int) -> None:
    """DeepGEMM's expected tensor-core utilisation in percent (0 .. 100, 0 = 100) for its heuristics. Stored and
    returned by get_tc_util; ignored by dgx's heuristics on sm_90."""
    _settings["tc_util"] = expect_int(new_tc_util, "new_tc_util", 0, 100)


def get_tc_util() -> int:
    """The value set_tc_util stored (100 when unset or 0)."""
    return _settings["tc_util"] or 100


def set_ignore_compile_dims(new_value: bool) -> None:
    """DeepGEMM's switch to compile no shape dimensions into its kernels. Ignored on sm_90: dgx always compiles N
    and K into the kernel and takes M at run time (what compiled_dims='nk' asks for)."""
    if not isinstance(new_value, bool):
        raise TypeError(f"new_value: expected a bool; got {type(new_value).__name__}")
    _settings["ignore_compile_dims"] = new_value


def set_block_size_multiple_of(new_value) -> None:
    """DeepGEMM's constraint on its heuristics' block sizes (an int, or (block M, block N) multiples). Checked and
    stored; ignored on sm_90: dgx's heuristics choose among the tiles its kernel supports."""
    values = new_value if isinstance(new_value, tuple) else (new_value, new_value)
    if len(values) != 2:
        raise TypeError(f"new_value: expected an int or a tuple of two ints; got {new_value!r}")
    for v in values:
        expect_int(v, "new_value", 1)
    _settings["block_size_multiple_of"] = tuple(values)


def set_mk_alignment_for_contiguous_layout(new_value: int) -> None:
    """The rows each group of a contiguous M-grouped A is aligned to (default 128): with the prefix-sum layout,
    group g starts at the previous group's end rounded up to it. dgx's m_indices layout needs a multiple of 128
    and its prefix-sum layout a multiple of 64; the GEMM calls check."""
    _settings["mk_alignment"] = expect_int(new_value, "new_value", 1)


def get_mk_alignment_for_contiguous_layout() -> int:
    """The alignment set_mk_alignment_for_contiguous_layout set (128 by default)."""
    return _settings["mk_alignment"]


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None) -> int:
    """The alignment that suits the kernels best: 128 on sm_90, whatever `expected_m` (a positive int or None)."""
    if expected_m is not None:
        expect_int(expected_m, "expected_m", 0)
    return _DGX_ALIGNMENT
