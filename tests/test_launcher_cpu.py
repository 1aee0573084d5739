"""runtime.Launcher on the CPU: per-stream launch configs, shared safely between threads.

The configs are real cuda.bindings objects (they need no GPU); only cuLaunchKernelEx is faked.
"""

from __future__ import annotations

import threading
import time

from dgx import runtime

SHAPE = runtime.LaunchShape(grid=(66, 2, 1), block=(384, 1, 1), cluster=(2, 1, 1), dynamic_smem=200_000)


class FakeDriver:
    """The real driver module, but cuLaunchKernelEx records what it was given instead of launching.

    With ``pause`` it sleeps before reading the config, so another thread gets to run in between (a
    shared config changed meanwhile would then be seen with the other thread's stream).
    """

    def __init__(self, pause: float = 0.0, result: int = 0):
        self._real = runtime._driver()
        self.pause = pause
        self.result = result
        self.calls: list[tuple[int, object, int, int]] = []  # (thread id, config, its stream, params address)
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def cuLaunchKernelEx(self, config, function, params, extra):
        if self.pause:
            time.sleep(self.pause)
        with self._lock:
            self.calls.append((threading.get_ident(), config, int(config.hStream), params))
        return (self.result,)


def make_launcher(driver: FakeDriver) -> runtime.Launcher:
    kernel = runtime.LoadedKernel("dgx_fake_kernel", object(), object(), 0, SHAPE.dynamic_smem)
    launcher = runtime.Launcher(kernel, SHAPE)
    launcher._drv = driver
    return launcher


def test_one_config_per_stream_distinct_and_stable():
    drv = FakeDriver()
    launcher = make_launcher(drv)
    params = runtime.ParamPack([("u64", 0), ("i32", 64)])
    for stream in (0x7, 0x9, 0x7, 0, 0x9):
        launcher.launch(stream, params)
    configs = {}
    for _, config, stream, address in drv.calls:
        assert address == params.address
        assert configs.setdefault(stream, config) is config  # the same object on every launch there
    assert sorted(configs) == [0, 0x7, 0x9]
    assert len({id(c) for c in configs.values()}) == 3  # distinct per stream
    for stream, config in configs.items():
        assert int(config.hStream) == stream
        assert (config.gridDimX, config.gridDimY, config.gridDimZ) == SHAPE.grid
        assert (config.blockDimX, config.blockDimY, config.blockDimZ) == SHAPE.block
        assert config.sharedMemBytes == SHAPE.dynamic_smem
        assert config.numAttrs == 1
        cluster = config.attrs[0].value.clusterDim
        assert (cluster.x, cluster.y, cluster.z) == SHAPE.cluster
    assert launcher.config_for(0x7) is configs[0x7]


def test_threads_on_different_streams_each_launch_on_their_own():
    drv = FakeDriver(pause=0.0002)
    launcher = make_launcher(drv)
    params = runtime.ParamPack([("u64", 0)])
    streams = [0x100 + i for i in range(4)]
    seen: dict[int, int] = {}
    start = threading.Barrier(len(streams))

    def run(stream: int) -> None:
        seen[threading.get_ident()] = stream
        start.wait()
        for _ in range(50):
            launcher.launch(stream, params)

    threads = [threading.Thread(target=run, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(drv.calls) == 50 * len(streams)
    wrong = [(seen[tid], stream) for tid, _, stream, _ in drv.calls if stream != seen[tid]]
    assert not wrong, f"{len(wrong)} launches went to another thread's stream, e.g. {wrong[:3]}"


def test_many_streams_are_bounded_and_still_right():
    drv = FakeDriver()
    launcher = make_launcher(drv)
    params = runtime.ParamPack([("u64", 0)])
    streams = list(range(1, 3 * runtime.MAX_STREAM_CONFIGS))
    for stream in streams:
        launcher.launch(stream, params)
    assert [s for _, _, s, _ in drv.calls] == streams
    assert len(launcher._configs) <= runtime.MAX_STREAM_CONFIGS
    launcher.launch(streams[-1], params)  # the latest stream's config is kept
    assert drv.calls[-1][1] is drv.calls[-2][1]

