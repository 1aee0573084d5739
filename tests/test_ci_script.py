"""The test command (`bash .ci/run`, the README's) leaves the environment of the README's main job alone.

The main job installs dgx and a torch (often a CUDA build) into `.venv`; the test command must not replace that
torch, reuse that kernel cache, or take the caller's DGX_* settings. The script runs here against stand-ins for
python3, pip and dgx that record what they were asked to do, so nothing is installed.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"


def _ci_venv() -> str:
    match = re.search(r"^TEST_VENV=(\S+)", CI.read_text(), re.M)
    assert match, ".ci/run names its environment in TEST_VENV"
    return match.group(1)


def _ignored(name: str) -> bool:
    patterns = [p.strip() for p in (ROOT / ".gitignore").read_text().splitlines() if p.strip() and not p.startswith("#")]
    return any(fnmatch.fnmatch(name + "/", p.lstrip("/")) or fnmatch.fnmatch(name, p.strip("/")) for p in patterns)


def test_tests_have_their_own_environment():
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m venv .venv " in readme  # the main job's environment
    venv = _ci_venv()
    assert venv.strip("./") != ".venv".strip("./")
    assert _ignored(venv), f"{venv} is not ignored by .gitignore"
    assert f"`{venv}`" in readme, "the README says where the tests install"


# A python3 that knows `-m venv DIR` (it writes an activate script and stand-ins for the environment's python
# and dgx) and logs every other call with the environment it ran in.
FAKE_PYTHON = textwrap.dedent(
    """\
    #!/usr/bin/env bash
    echo "python3 VIRTUAL_ENV=${VIRTUAL_ENV:-} $*" >> "$CI_LOG"
    if [ "${1:-}" = "-m" ] && [ "${2:-}" = "venv" ]; then
        mkdir -p "$3/bin"
        dir="$(cd "$3" && pwd)"
        printf 'export VIRTUAL_ENV=%s\\nexport PATH=%s/bin:$PATH\\n' "$dir" "$dir" > "$3/bin/activate"
        for tool in python dgx; do
            printf '#!/usr/bin/env bash\\necho "%s VIRTUAL_ENV=$VIRTUAL_ENV DGX_CACHE_DIR=$DGX_CACHE_DIR strict=${DGX_JIT_STRICT:-unset} $*" >> "$CI_LOG"\\n' "$tool" > "$3/bin/$tool"
            chmod +x "$3/bin/$tool"
        done
    fi
    """
)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_run_leaves_the_main_environment_alone(tmp_path):
    repo = tmp_path / "clone"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(CI, repo / ".ci" / "run")
    # the README's main job: an activated .venv holding a CUDA torch, and its kernel cache
    main_venv = repo / ".venv"
    (main_venv / "bin").mkdir(parents=True)
    torch_version = main_venv / "lib" / "python3" / "site-packages" / "torch" / "version.py"
    torch_version.parent.mkdir(parents=True)
    torch_version.write_text("__version__ = '2.14.1+cu130'\n")
    (main_venv / "bin" / "python3").write_text(FAKE_PYTHON)
    (main_venv / "bin" / "python3").chmod(0o755)
    user_cache = tmp_path / "user-cache"
    user_cache.mkdir()
    before = _tree(main_venv)
    log = tmp_path / "log"
    environ = {
        "PATH": f"{main_venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "VIRTUAL_ENV": str(main_venv),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "CI_LOG": str(log),
        "DGX_CACHE_DIR": str(user_cache),
        "DGX_JIT_STRICT": "1",
    }
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], env=environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    test_venv = str((repo / _ci_venv()).resolve())
    assert calls[0] == f"python3 VIRTUAL_ENV={main_venv} -m venv {_ci_venv()}"  # a new environment, made from it
    rest = calls[1:]
    assert any("pip install" in c and "torch==" in c for c in rest)
    assert any(c.startswith("python ") and "pytest" in c for c in rest)
    for call in rest:  # every install and the tests ran in the tests' own environment
        assert f"VIRTUAL_ENV={test_venv} " in call, call
        assert f"DGX_CACHE_DIR={user_cache} " not in call and "strict=unset" in call, call
    assert _tree(main_venv) == before  # the main job's torch (and everything else there) untouched
    assert list(user_cache.iterdir()) == []
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith("dgx-ci-cache")]
    assert leftovers == []  # the tests' kernel cache is removed at the end
