"""The SASS FFMA pass's settings in the kernel cache key (CPU only: compiles and the pass are faked).

DGX_SASS_INTERLEAVE is the one switch: on applies the pass with sass_tools' defaults to every kernel; off and
auto (the default) apply it to none."""

from __future__ import annotations

import pytest

from dgx import sass_tools
from dgx.cache import KernelCache
from dgx import compiler, jit

ARCH = "sm_90a"
PLAIN = jit.KernelSource(name="dgx_key_test", source='extern "C" __global__ void dgx_key_test() {}')


def key(src: jit.KernelSource = PLAIN) -> str:
    return jit.kernel_key(src, ARCH)


@pytest.fixture
def mode(monkeypatch):
    """Set DGX_SASS_INTERLEAVE (auto|on|off) for the test."""

    def set_mode(value: str) -> None:
        monkeypatch.setenv("DGX_SASS_INTERLEAVE", value)

    set_mode("auto")
    return set_mode


def test_resolution(mode):
    assert jit.sass_pass_settings() == jit.SassPassSettings(False)  # auto: off
    mode("on")
    on = jit.sass_pass_settings()
    assert on.enabled and on.version == sass_tools.PASS_VERSION
    assert (on.min_run, on.fraction) == (sass_tools.DEFAULT_MIN_RUN, sass_tools.DEFAULT_FRACTION)
    mode("off")
    assert not jit.sass_pass_settings().enabled
    mode("sometimes")
    with pytest.raises(ValueError, match="DGX_SASS_INTERLEAVE=.sometimes.: expected auto, on or off"):
        jit.sass_pass_settings()


def test_key_follows_the_mode(mode):
    auto = key()
    assert jit.key_inputs(PLAIN, ARCH)["sass_pass"] == "off"
    mode("off")
    assert key() == auto
    mode("on")
    assert key() != auto
    assert jit.key_inputs(PLAIN, ARCH)["sass_pass"]["version"] == str(sass_tools.PASS_VERSION)


def test_the_fraction_is_keyed_by_value():
    """One value spelled two ways (1, 1.0; 0.5, 0.50) gives one key value."""
    a = jit.SassPassSettings(True, "v", 8, 1).key_value()
    assert a == jit.SassPassSettings(True, "v", 8, 1.0).key_value()
    assert jit.SassPassSettings(True, "v", 8, 0.5).key_value() == jit.SassPassSettings(True, "v", 8, 0.50).key_value()
    assert a != jit.SassPassSettings(True, "v", 8, 0.5).key_value()


@pytest.mark.parametrize(
    "name, value", [("DEFAULT_MIN_RUN", 9), ("DEFAULT_FRACTION", 0.75), ("PASS_VERSION", "ffma-yield-reuse-next")]
)
def test_changing_a_default_or_the_version_changes_the_key_when_on(mode, monkeypatch, name, value):
    mode("on")
    on_before = key()
    mode("off")
    off_before = key()
    monkeypatch.setattr(sass_tools, name, value)
    assert key() == off_before  # off: the pass's parameters do not enter the key
    mode("on")
    assert key() != on_before


@pytest.fixture
def fake_build(monkeypatch, tmp_cache):
    """Fake NVRTC and pass: each compile returns distinct bytes; each pass call records its parameters."""
    monkeypatch.setattr(jit, "_caches", {})
    calls: list[dict] = []
    counter = iter(range(1000))

    def compile_cubin(source, kernel, options, want_ptx=False):
        return compiler.CompileResult(b"\x7fELF-compile-%d" % next(counter), None, "", 0.0, tuple(options))

    def interleave_ffma(cubin, **kwargs):
        calls.append(kwargs)
        tag = b"|patched min_run=%d fraction=%s" % (kwargs["min_run"], str(kwargs["fraction"]).encode())
        return cubin + tag, "report"

    monkeypatch.setattr(compiler, "compile_cubin", compile_cubin)
    monkeypatch.setattr(sass_tools, "interleave_ffma", interleave_ffma)
    return calls


def test_a_cubin_is_never_returned_for_other_settings(mode, fake_build, monkeypatch, tmp_cache):
    """Each setting gets its own entry, built with exactly those settings; equal settings share one."""
    plain = jit.get_cubin(PLAIN, ARCH)
    assert b"patched" not in plain and fake_build == []
    mode("on")
    a = jit.get_cubin(PLAIN, ARCH)
    assert a.endswith(b"min_run=%d fraction=%s" % (sass_tools.DEFAULT_MIN_RUN, str(sass_tools.DEFAULT_FRACTION).encode()))
    assert fake_build == [dict(min_run=sass_tools.DEFAULT_MIN_RUN, fraction=sass_tools.DEFAULT_FRACTION,
                               skip_interleaved=True)]
    monkeypatch.setattr(sass_tools, "DEFAULT_MIN_RUN", 5)
    b = jit.get_cubin(PLAIN, ARCH)
    assert b.endswith(b"min_run=5 fraction=%s" % str(sass_tools.DEFAULT_FRACTION).encode()) and len(fake_build) == 2
    assert jit.get_cubin(PLAIN, ARCH) == b and len(fake_build) == 2
    mode("auto")
    assert jit.get_cubin(PLAIN, ARCH) == plain and len(fake_build) == 2
    assert len(KernelCache(tmp_cache).entries()) == 3
