"""Faults a user meets, injected into a real ``dgx`` process: Ctrl-C and SIGTERM during ``dgx warmup``.

Each test runs the CLI as a subprocess in its own session, so it can signal the whole process group
(what a terminal's Ctrl-C does) or the main process alone, and then look for anything left behind:
processes of the session (workers, the resource tracker), unfinished files in the cache, entries that
fail verification. Subprocesses are killed in ``finally`` whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# 35 kernels that compile in ~0.3-1.6 s each: enough that an interrupt lands mid-queue. (K 1536: at K 7168 the
# straight-line decode kernels take 6 s, and warmup compiles the longest first, so a first Ctrl-C would wait for two.)
SHAPES = [{"kind": "dense", "n": n, "k": 1536, "max_m": 2048} for n in (2112, 4096, 7168)]


def cli_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGX_")}
    env.update(PYTHONPATH=str(ROOT), DGX_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1", **extra)
    return env


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def session_processes(sid: int) -> list[str]:
    """'pid comm' of every live process of session ``sid`` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm_end = stat.rindex(")")
        fields = stat[comm_end + 2 :].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            found.append(f"{entry} {stat[stat.index('(') + 1 : comm_end]}")
    return found


def wait_gone(sid: int, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = session_processes(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


class Warmup:
    """A ``dgx warmup`` subprocess in its own session; stderr is read line by line."""

    def __init__(self, tmp_path: Path, jobs: int = 2):
        self.cache = tmp_path / "cache"
        shapes = tmp_path / "shapes.json"
        shapes.write_text(json.dumps(SHAPES))
        self.env = cli_env(self.cache)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "warmup", "--shapes", str(shapes), "-j", str(jobs)],
            cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if text in line:
                return
        pytest.fail(f"never saw {text!r}; stderr so far:\n{''.join(self.lines)}")

    def finish(self, timeout: float) -> tuple[int, str, str, float]:
        t0 = time.monotonic()
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, "".join(self.lines) + err, time.monotonic() - t0

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def check_cache_clean(cache: Path, env: dict[str, str]) -> dict:
    """No unfinished files under tmp/, and every entry verifies."""
    leftovers = list((cache / "tmp").iterdir()) if (cache / "tmp").exists() else []
    assert leftovers == [], leftovers
    result = run_cli(["cache", "verify", "--json"], env)
    assert result.returncode == 0, result.stderr
    verified = json.loads(result.stdout)
    assert verified["removed"] == 0 and verified["corrupt"] == [], verified
    return verified


def kept_count(stderr: str) -> int:
    line = next(l for l in stderr.splitlines() if "kept" in l)
    return int(line.split("kept ")[1].split()[0])


def test_one_sigint_finishes_running_compiles_and_keeps_them(tmp_path):
    w = Warmup(tmp_path)
    try:
        w.wait_for("to compile")
        time.sleep(1.0)  # compiles are running
        os.killpg(w.proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
        code, _, err, seconds = w.finish(timeout=60)
        assert code == 130, err
        assert "Traceback" not in err
        assert "waiting for the" in err and "interrupted by SIGINT: kept" in err and "not built" in err
        assert seconds < 15, f"exit took {seconds:.1f} s after Ctrl-C"
        assert wait_gone(w.proc.pid) == []
        verified = check_cache_clean(w.cache, w.env)
        assert verified["ok"] == kept_count(err) > 0
    finally:
        w.kill()


def test_second_sigint_kills_running_compiles_at_once(tmp_path):
    w = Warmup(tmp_path)
    try:
        w.wait_for("to compile")
        time.sleep(1.0)
        os.killpg(w.proc.pid, signal.SIGINT)
        time.sleep(0.3)
        t0 = time.monotonic()
        os.killpg(w.proc.pid, signal.SIGINT)
        code, _, err, _ = w.finish(timeout=60)
        seconds = time.monotonic() - t0
        assert code == 130, err
        assert "Traceback" not in err and "Aborted" not in err
        assert seconds < 5, f"exit took {seconds:.1f} s after the second Ctrl-C"
        assert wait_gone(w.proc.pid) == []
        verified = check_cache_clean(w.cache, w.env)
        assert verified["ok"] == kept_count(err)
    finally:
        w.kill()


def test_sigterm_to_the_main_process_leaves_nothing_behind(tmp_path):
    w = Warmup(tmp_path)
    try:
        w.wait_for("to compile")
        time.sleep(1.0)
        os.kill(w.proc.pid, signal.SIGTERM)  # the main process only, as a service manager may
        code, _, err, seconds = w.finish(timeout=60)
        assert code == 128 + signal.SIGTERM, err
        assert "Traceback" not in err and "interrupted by SIGTERM: kept" in err
        assert seconds < 15
        assert wait_gone(w.proc.pid) == [], "workers or the resource tracker outlived dgx warmup"
        check_cache_clean(w.cache, w.env)
    finally:
        w.kill()


def test_sigint_while_enumerating_stops_at_once(tmp_path):
    """A long enumeration (max_m 2**20, the most warmup takes) shows progress and stops at the first Ctrl-C."""
    cache = tmp_path / "cache"
    shapes = tmp_path / "big.json"
    shapes.write_text(json.dumps([{"kind": "dense", "n": 2112, "k": 7168, "max_m": 1 << 20}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "warmup", "--shapes", str(shapes), "-j", "2"],
        cwd=ROOT, env=cli_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        lines = []
        while True:
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
            if "enumerating:" in line:
                break
        assert "ETA" in line
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 5
        assert proc.returncode == 130
        assert "while enumerating kernels; nothing was compiled" in err and "Traceback" not in err
        assert wait_gone(proc.pid) == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
