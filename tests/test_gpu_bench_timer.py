"""dgx bench's kernel timer on the GPU: CUPTI through torch.profiler sees torch's kernels, copies and dgx's
driver-API launches, sums a call's kernels, and is never longer than the CUDA-events timing of the same call."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def flush():
    from dgx.bench.timing import L2Flusher

    return L2Flusher()


def test_kernel_timer_matmul_not_longer_than_events(flush):
    from dgx.bench.kernel_timer import time_kernels
    from dgx.bench.timing import time_gpu

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    fn = lambda: torch.matmul(a, b)  # noqa: E731
    events = time_gpu(fn, flush, 5, 30)
    kernel = time_kernels(fn, flush, 5, 30)
    assert len(kernel.samples_us) == 30 and kernel.kernels
    assert all(x > 0 for x in kernel.samples_us)
    # the flush (330 µs of zeroing) must not be in the samples: a 1024³ BF16 matmul takes a few µs
    assert kernel.max_us < 200, kernel.kernels
    # events hold the kernel plus what passes between the two events; 2% and 0.5 µs of slack for clock noise
    assert kernel.median_us <= events.median_us * 1.02 + 0.5, (kernel.median_us, events.median_us)


def test_kernel_timer_sums_a_calls_kernels_and_counts_copies(flush):
    from dgx.bench.kernel_timer import time_kernels

    x = torch.zeros(1 << 24, device="cuda")
    one = time_kernels(lambda: x.add_(1.0), flush, 2, 10)
    two = time_kernels(lambda: (x.add_(1.0), x.mul_(0.5)), flush, 2, 10)
    assert len(one.kernels) == 1 and len(two.kernels) == 2
    assert two.median_us > 1.3 * one.median_us  # two passes over 64 MB (the second partly from L2)
    src = torch.ones(1 << 28, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    copy = time_kernels(lambda: dst.copy_(src), None, 2, 10)  # a device-to-device memcpy, not a kernel
    assert copy.median_us > 0 and len(copy.kernels) == 1
    assert 2 * src.numel() / (copy.median_us * 1e-6) / 1e9 < 10_000  # a plausible GB/s


def test_kernel_timer_sees_dgx_driver_api_launches(flush):
    import dgx
    from dgx.bench.kernel_timer import time_kernels
    from dgx.torch_utils import per_block_cast_to_fp8, per_token_cast_to_fp8

    m, n, k = 128, 2112, 7168
    a = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    b = per_block_cast_to_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    t = time_kernels(lambda: dgx.fp8_gemm_nt(a, b, d), flush, 3, 10)
    # a call with no activity between its fences would have raised: the driver-API launch was recorded
    assert t.kernels and 2 < t.median_us < 200, (t.kernels, t.median_us)
