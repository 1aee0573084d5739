"""The SASS FFMA pass's settings in the kernel cache key (CPU only: compiles and the pass are faked)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import sass_tools
from cache import KernelCache
from dgx import compiler, jit

ARCH = "sm_90a"
PLAIN = jit.KernelSource(name="dgx_key_test", source='extern "C" __global__ void dgx_key_test() {}')
CANDIDATE = replace(PLAIN, sass_interleave=True)  # a kernel that asks for the pass (auto applies it)


def key(src: jit.KernelSource) -> str:
    return jit.kernel_key(src, ARCH)


@pytest.fixture
def mode(monkeypatch):
    """Set DGX_SASS_INTERLEAVE (auto|on|off) for the test."""

    def set_mode(value: str) -> None:
        monkeypatch.setenv("DGX_SASS_INTERLEAVE", value)

    set_mode("auto")
    return set_mode


def test_resolution_per_kernel(mode):
    assert jit.sass_pass_settings(PLAIN) == jit.SassPassSettings(False)
    on = jit.sass_pass_settings(CANDIDATE)
    assert on.enabled and on.version == sass_tools.PASS_VERSION
    assert (on.min_run, on.fraction) == (sass_tools.DEFAULT_MIN_RUN, sass_tools.DEFAULT_FRACTION)
    mode("on")
    assert jit.sass_pass_settings(PLAIN) == on
    mode("off")
    assert not jit.sass_pass_settings(CANDIDATE).enabled


def test_key_follows_the_mode_as_it_applies(mode):
    assert key(CANDIDATE) != key(PLAIN)  # auto: the pass applies to the candidate only
    auto_on = key(CANDIDATE)
    mode("on")  # on: both patched alike, so both have auto's key of the patched kernel
    assert key(PLAIN) == key(CANDIDATE) == auto_on
    mode("off")  # off: nothing patched
    assert key(CANDIDATE) == key(PLAIN) != auto_on
    assert jit.key_inputs(CANDIDATE, ARCH)["sass_pass"] == "off"


@pytest.mark.parametrize(
    "change",
    [dict(sass_min_run=4), dict(sass_min_run=9), dict(sass_fraction=0.25), dict(sass_fraction=1.0)],
)
def test_each_parameter_changes_the_key(mode, change):
    assert key(replace(CANDIDATE, **change)) != key(CANDIDATE)
    mode("on")
    assert key(replace(PLAIN, **change)) != key(PLAIN)


def test_defaults_are_keyed_by_value(mode):
    """Naming a default explicitly gives the default's key; one value spelled two ways, one key."""
    explicit = replace(CANDIDATE, sass_min_run=sass_tools.DEFAULT_MIN_RUN, sass_fraction=sass_tools.DEFAULT_FRACTION)
    assert key(explicit) == key(CANDIDATE)
    assert key(replace(CANDIDATE, sass_fraction=1)) == key(replace(CANDIDATE, sass_fraction=1.0))


@pytest.mark.parametrize(
    "name, value", [("DEFAULT_MIN_RUN", 9), ("DEFAULT_FRACTION", 0.75), ("PASS_VERSION", "ffma-yield-reuse-next")]
)
def test_changing_a_default_or_the_version_changes_the_key(mode, monkeypatch, name, value):
    explicit = replace(CANDIDATE, sass_min_run=sass_tools.DEFAULT_MIN_RUN, sass_fraction=sass_tools.DEFAULT_FRACTION)
    before = key(CANDIDATE)
    monkeypatch.setattr(sass_tools, name, value)
    assert key(CANDIDATE) != before
    if name != "PASS_VERSION":  # parameters given explicitly do not follow the defaults
        assert key(explicit) == before


def test_key_ignores_parameters_when_the_pass_is_off(mode, monkeypatch):
    tuned = dict(sass_min_run=3, sass_fraction=0.25)
    assert key(replace(PLAIN, **tuned)) == key(PLAIN)  # auto, kernel not asking for the pass
    mode("off")
    assert key(replace(CANDIDATE, **tuned)) == key(CANDIDATE) == key(PLAIN)
    monkeypatch.setattr(sass_tools, "DEFAULT_MIN_RUN", 2)
    monkeypatch.setattr(sass_tools, "PASS_VERSION", "another-pass")
    assert key(CANDIDATE) == key(PLAIN)


@pytest.mark.parametrize(
    "change, field",
    [(dict(sass_min_run=0), "sass_min_run"), (dict(sass_min_run=True), "sass_min_run"),
     (dict(sass_fraction=1.5), "sass_fraction"), (dict(sass_fraction=float("nan")), "sass_fraction")],
)
def test_bad_parameters_are_refused(mode, change, field):
    with pytest.raises(ValueError, match=f"kernel dgx_key_test: {field}: expected"):
        key(replace(CANDIDATE, **change))
    mode("off")
    key(replace(CANDIDATE, **change))  # not applied, so not checked


@pytest.fixture
def fake_build(monkeypatch, tmp_cache):
    """Fake NVRTC and pass: each compile returns distinct bytes; each pass call records its parameters."""
    monkeypatch.setattr(jit, "_cubins", {})
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


def test_a_cubin_is_never_returned_for_other_settings(mode, fake_build, tmp_cache):
    """Each setting gets its own entry, built with exactly those settings; equal settings share one."""
    a = jit.get_cubin(replace(CANDIDATE, sass_min_run=5), ARCH)
    assert a.endswith(b"min_run=5 fraction=0.5")
    assert fake_build == [dict(min_run=5, fraction=0.5, skip_interleaved=True)]
    b = jit.get_cubin(replace(CANDIDATE, sass_min_run=6), ARCH)
    assert b.endswith(b"min_run=6 fraction=0.5") and len(fake_build) == 2
    c = jit.get_cubin(replace(CANDIDATE, sass_min_run=5, sass_fraction=0.25), ARCH)
    assert c.endswith(b"min_run=5 fraction=0.25") and len(fake_build) == 3
    assert jit.get_cubin(replace(CANDIDATE, sass_min_run=5), ARCH) == a and len(fake_build) == 3
    mode("off")
    plain = jit.get_cubin(replace(CANDIDATE, sass_min_run=5), ARCH)
    assert b"patched" not in plain and len(fake_build) == 3
    assert len(KernelCache(tmp_cache).entries()) == 4
