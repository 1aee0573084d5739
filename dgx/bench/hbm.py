"""The HBM peak bandwidth of a GPU, from its name (datasheet figures; pure Python).

The reports give memory-bound GEMM rows their share of this peak next to their share of the copy bandwidth
measured in the same run. A device missing here (or a MIG slice, whose name differs) has no peak: its reports
show only the share of the measured copy bandwidth.
"""

from __future__ import annotations

from .mqa_suites import HBM_PEAK_GBPS

HBM_PEAKS_GBPS: dict[str, float] = {
    "NVIDIA H100 80GB HBM3": HBM_PEAK_GBPS,  # H100 SXM5, HBM3: 3.35 TB/s
    "NVIDIA H100 PCIe": 2000.0,  # HBM2e: 2.0 TB/s
    "NVIDIA H100 NVL": 3900.0,  # HBM3: 3.9 TB/s
    "NVIDIA H800": 3350.0,  # H800 SXM5, HBM3: 3.35 TB/s
    "NVIDIA H200": 4800.0,  # HBM3e: 4.8 TB/s
}
"""Datasheet HBM bandwidth in GB/s, keyed by the name the CUDA driver reports (``torch.cuda.get_device_name()``)."""


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


_BY_NAME = {_norm(k): v for k, v in HBM_PEAKS_GBPS.items()}


def hbm_peak_gbps(device: str | None) -> float | None:
    """The datasheet HBM bandwidth of ``device`` (its full name, case and spacing aside), or None if unknown."""
    if not device:
        return None
    return _BY_NAME.get(_norm(device))
