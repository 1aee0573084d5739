"""Which SM count kernels are planned for: the device's, DGX_NUM_SMS, or dgx.set_num_sms()."""

from __future__ import annotations

from . import env, runtime
from .errors import DgxError
from .limits import MAX_NUM_SMS

_num_sms: int | None = None
generation = 0  # bumped by set_num_sms so that per-call caches keyed on it drop their old plans


def set_num_sms(num_sms: int) -> None:
    """Plan kernels for `num_sms` SMs (e.g. to leave SMs to a concurrent communication kernel)."""
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or not 0 < num_sms <= MAX_NUM_SMS:
        raise ValueError(
            f"set_num_sms: expected an SM count from 1 to {MAX_NUM_SMS} (the most a Hopper GPU has); got {num_sms!r}"
        )
    try:
        available = runtime.device_info(0).num_sms if runtime.device_count() else num_sms
    except Exception:  # no usable driver: nothing to check the count against
        available = num_sms
    if num_sms > available:
        raise ValueError(f"set_num_sms: the device has {available} SMs; got {num_sms}")
    global _num_sms, generation
    _num_sms = num_sms
    generation += 1


def get_num_sms(device: int = 0) -> int:
    """SMs kernels are planned for: set_num_sms(), else DGX_NUM_SMS, else all of the device's."""
    if _num_sms is not None:
        return _num_sms
    override = env.num_sms_override()
    if override is not None:
        return override
    try:
        return runtime.device_info(device).num_sms
    except Exception as exc:  # no driver, no GPU, or a loader error from cuda-bindings
        raise DgxError(
            f"get_num_sms: cannot read the SM count of CUDA device {device} ({type(exc).__name__}: {exc}); "
            "without a GPU and driver, call dgx.set_num_sms(N) or set DGX_NUM_SMS=N"
        ) from exc
