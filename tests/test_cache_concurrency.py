"""Several processes (spawned, as dgx's users spawn ranks) sharing one cache root."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue
import time
import traceback

from dgx.cache import KernelCache, compute_key, export_bundle, import_bundle

N_PROCS = 8
TIMEOUT = 60


def _build_worker(root, key, counter_path, barrier, results):
    try:
        c = KernelCache(root)  # the root does not exist yet: the processes race to create it too

        def build():
            with open(counter_path, "a") as f:
                f.write(f"{os.getpid()}\n")
            time.sleep(0.5)  # long enough that every process asks while the build runs
            return b"\x7fELF" + os.urandom(64), {"name": "fp8_gemm"}  # random: two builds would differ

        barrier.wait()
        cubin = c.get_or_build(key, build)
        results.put(("ok", hashlib.sha256(cubin).hexdigest(), c.stats.builds))
    except BaseException:
        results.put(("error", traceback.format_exc(), 0))


def _import_worker(root, bundle, barrier, results):
    try:
        c = KernelCache(root)
        barrier.wait()
        report = import_bundle(c, bundle)
        results.put(("ok", report.imported, report.skipped))
    except BaseException:
        results.put(("error", traceback.format_exc(), ()))


def _run(target, args_of, n):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_of(i), barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    try:
        out = [results.get(timeout=TIMEOUT) for _ in procs]
    except queue.Empty:
        raise AssertionError(f"workers did not finish: exit codes {[p.exitcode for p in procs]}") from None
    finally:
        for p in procs:
            p.join(timeout=TIMEOUT)
    errors = [r[1] for r in out if r[0] == "error"]
    assert not errors, errors[0]
    assert [p.exitcode for p in procs] == [0] * n
    return out


def test_eight_processes_one_new_kernel_build_once(tmp_path):
    root = str(tmp_path / "shared" / "cache")
    key = compute_key({"kernel": "fp8_gemm_nt", "n": 4096})
    counter = tmp_path / "builds.log"
    out = _run(_build_worker, lambda i: (root, key, str(counter)), N_PROCS)

    assert len(counter.read_text().splitlines()) == 1  # exactly one build across all processes
    assert len({digest for _, digest, _ in out}) == 1  # everyone got the same bytes
    assert sorted(builds for _, _, builds in out) == [0] * (N_PROCS - 1) + [1]
    c = KernelCache(root)
    assert hashlib.sha256(c.load(key)).hexdigest() == out[0][1]
    assert c.verify().ok == (key,)
    assert os.listdir(os.path.join(root, "tmp")) == []


def test_concurrent_imports_of_one_bundle(tmp_path):
    src = KernelCache(tmp_path / "src")
    keys = [compute_key({"kernel": i}) for i in range(20)]
    for i, key in enumerate(keys):
        src.store(key, f"cubin {i}".encode() * 100, {"name": f"k{i}"})
    bundle = str(tmp_path / "warm.tar.gz")
    assert export_bundle(src, bundle) == 20

    root = str(tmp_path / "dest")
    KernelCache(root).store(keys[0], src.load(keys[0]), {"name": "k0"})  # one is there already
    out = _run(_import_worker, lambda i: (root, bundle), 4)

    imported = [k for _, imp, _ in out for k in imp]
    assert sorted(imported) == sorted(keys[1:])  # each entry landed exactly once
    for _, imp, skipped in out:
        assert sorted(imp + skipped) == sorted(keys)
    dest = KernelCache(root)
    assert dest.verify().ok == tuple(sorted(keys))
    for key in keys:
        assert dest.get_or_build(key, _no_build, allow_build=False) == src.load(key)
    assert os.listdir(os.path.join(root, "tmp")) == []


def _no_build():
    raise AssertionError("must not build")
