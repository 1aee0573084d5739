"""Exception types raised by dgx.

Every error says what was expected and what came. Validation never uses ``assert``
(asserts vanish under ``python -O``).
"""

from __future__ import annotations


class DgxError(Exception):
    """Base class of every dgx error."""


class CompileError(DgxError):
    """NVRTC rejected a kernel.

    Attributes:
        kernel: the kernel's name.
        log: the full NVRTC log.
        source_path: where the rendered source was saved so the failure can be reproduced.
    """

    def __init__(self, kernel: str, log: str, source_path: str | None, options: list[str] | None = None):
        self.kernel = kernel
        self.log = log
        self.source_path = source_path
        self.options = list(options or [])
        where = f" (source saved to {source_path})" if source_path else ""
        super().__init__(f"NVRTC failed to compile kernel {kernel!r}{where}:\n{log.strip()}")


class CudaError(DgxError):
    """A CUDA driver or NVRTC call returned an error code."""

    def __init__(self, call: str, result: object, detail: str = ""):
        self.call = call
        self.result = result
        msg = f"{call} failed with {result}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class ConfigError(DgxError, ValueError):
    """A setting (an environment variable, an option) has a value dgx cannot use; the message names the
    setting, the value and what to do."""


class EnvError(ConfigError):
    """An environment variable dgx reads has a value it cannot use.

    Attributes:
        name: the variable.
        value: its value.
    """

    def __init__(self, name: str, value: str, expected: str, fix: str):
        self.name = name
        self.value = value
        super().__init__(f"{name}={value!r}: expected {expected}; {fix}")


class JitStrictError(DgxError):
    """A kernel was missing from the cache while ``DGX_JIT_STRICT=1`` forbids compiling at run time.

    The message ends with what the cache holds instead when that was built by another NVRTC (a cache
    warmed by another install: every key differs).
    """


class LayoutConversionWarning(UserWarning):
    """Scales came in a layout the kernels cannot read as it is, so every call converts them on the GPU first (one
    extra kernel); converting them once ahead (get_mn_major_tma_aligned_tensor) saves it. Shown once per process."""


class Sm100OnlyError(DgxError, NotImplementedError):
    """A DeepGEMM name or argument that exists for sm_100 (Blackwell) only: FP4 operands, the Mega MoE kernels, the
    MN-major K-grouped GEMM, varlen paged MQA. dgx's kernels are sm_90 (Hopper); the message names what was asked."""


class FamilyMissingError(DgxError, NotImplementedError):
    """A DeepGEMM name whose kernel family dgx does not have yet (BF16 GEMMs, einsum, ...): the message names the
    family. The name exists with DeepGEMM's signature so that code importing it loads."""
