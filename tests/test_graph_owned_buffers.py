"""runtime.DeviceTensorMaps under CUDA-graph capture (CPU: the driver is faked). The host buffer a captured copy
reads on every replay is held by the graph being captured, through a CUDA user object, and let go when that
graph is destroyed: captures do not pile buffers up, and a live graph never loses its source."""

from __future__ import annotations

import ctypes

import pytest

from dgx import runtime


class FakeMap:
    def __init__(self, fill: int):
        self.raw = (ctypes.c_ubyte * 128)(*([fill] * 128))

    def getPtr(self) -> int:
        return ctypes.addressof(self.raw)


class FakeDriver:
    """The real driver module's types, with the calls DeviceTensorMaps makes recorded instead of run."""

    def __init__(self, capturing: bool):
        self._real = runtime._driver()
        self.capturing = capturing
        self.user_objects: list[tuple[int, int]] = []  # (token, destructor address)
        self.retained: list[tuple[object, object, int, int]] = []
        self.copies: list[bytes] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _ok(self, *rest):
        return (self._real.CUresult.CUDA_SUCCESS, *rest)

    def cuMemAllocAsync(self, size, stream):
        return self._ok(0x7000_0000)

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):
        self.copies.append(ctypes.string_at(src, size))
        return self._ok()

    def cuStreamIsCapturing(self, stream):
        status = self._real.CUstreamCaptureStatus
        return self._ok(status.CU_STREAM_CAPTURE_STATUS_ACTIVE if self.capturing else status.CU_STREAM_CAPTURE_STATUS_NONE)

    def cuStreamGetCaptureInfo(self, stream):
        return self._ok(self._real.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE, 1, "the-graph", [], [], 0)

    def cuUserObjectCreate(self, ptr, destroy, count, flags):
        assert count == 1 and flags == self._real.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
        self.user_objects.append((ptr, int(destroy)))
        return self._ok(f"user-object-{ptr}")

    def cuGraphRetainUserObject(self, graph, obj, count, flags):
        self.retained.append((graph, obj, count, flags))
        return self._ok()

    def cuMemFreeAsync(self, ptr, stream):
        return self._ok()


@pytest.fixture
def owned(monkeypatch):
    monkeypatch.setattr(runtime, "_graph_owned", {})
    return runtime._graph_owned


def _destroy_graph(drv: FakeDriver) -> None:
    """What CUDA does when the graph and its instantiations are gone: call each user object's destructor."""
    for token, address in drv.user_objects:
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(token)


def test_a_captured_copy_keeps_its_source_until_the_graph_goes(monkeypatch, owned):
    drv = FakeDriver(capturing=True)
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    maps = runtime.DeviceTensorMaps([FakeMap(1), None, FakeMap(3)], stream=5)
    maps.release()
    assert drv.copies == [bytes([1] * 128) + bytes(128) + bytes([3] * 128)]
    ((token, destructor),) = drv.user_objects
    assert destructor == ctypes.cast(runtime._RELEASE_CALLBACK, ctypes.c_void_p).value
    assert drv.retained == [("the-graph", f"user-object-{token}", 1,
                             drv.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE)]
    held = owned[token]
    del maps
    assert bytes(held)[:128] == bytes([1] * 128)  # still there for every replay
    _destroy_graph(drv)
    assert owned == {}


def test_captures_do_not_pile_up(monkeypatch, owned):
    drv = FakeDriver(capturing=True)
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    for _ in range(50):
        runtime.DeviceTensorMaps([FakeMap(2)], stream=5).release()
    assert len(owned) == 50
    _destroy_graph(drv)
    assert owned == {}


def test_nothing_is_kept_outside_a_capture(monkeypatch, owned):
    drv = FakeDriver(capturing=False)
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    runtime.DeviceTensorMaps([FakeMap(4)], stream=5).release()
    assert owned == {} and drv.user_objects == [] and len(drv.copies) == 1
