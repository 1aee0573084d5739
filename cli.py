"""The ``dgx`` command: info, cache, inspect, warmup, bench.

Everything here is presentation: the work is done by dgx (warmup, heuristics, JIT), cache (the kernel
store) and sass_tools (cubin inspection). Optional parts (sass_tools' analyzer, dgx.bench) are imported
when a command needs them, so the other commands work without them.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import warnings

import click

import dgx
from dgx import env, interrupts, problems, user_errors, warmup as warmup_mod
from dgx import families
from dgx.kinds import SHORT_NAMES

# `dgx inspect --kind`: every family's kinds (dgx/families), by their short names (the benchmark's suites) or their
# shapes-file names.
INSPECT_KINDS = families.inspect_names()
BENCH_SUITES = SHORT_NAMES + (
    "mqa", "paged_mqa", "moe", "bf16", "bf16_masked", "bf16_contiguous", "bf16_k_grouped", "einsum", "fp8_einsum",
    "hc_prenorm", "skip_head_mid", "all")  # dgx.bench.SUITES, then "all" (a test checks)
BENCH_TIMERS = ("events", "kernel")  # dgx.bench.TIMERS (a test checks); dgx.bench is imported when bench runs
MAX_ERROR_LINES = 40


def _dist_version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {plural or word + 's'}"


def _emit_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _first_lines(text: str, limit: int = MAX_ERROR_LINES) -> str:
    lines = text.rstrip().splitlines()
    if len(lines) <= limit:
        return "\n".join(lines)
    return "\n".join(lines[:limit] + [f"... ({len(lines) - limit} more lines)"])


def _kernel_cache():
    """The KernelCache at DGX_CACHE_DIR (created if absent); its errors reach the user as one line."""
    from dgx import jit

    return jit.kernel_cache()


class _Main(click.Group):
    """The ``dgx`` group: errors the user can fix become one ``Error:`` line (exit 1), interrupts exit
    128 + the signal, and nothing the user did prints a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except interrupts.Interrupted as exc:
            click.echo(f"dgx: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("dgx: interrupted by SIGINT", err=True)
            ctx.exit(130)
        except Exception as exc:
            message = user_errors.user_message(exc)
            if message is None:
                raise
            raise click.ClickException(message) from None


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line on stderr (no source lines)."""
    click.echo(f"dgx: warning: {message}", err=True)


def _default_num_sms() -> int:
    return env.num_sms_override() or warmup_mod.DEFAULT_NUM_SMS


def _num_sms(given: int | None) -> int:
    """--num-sms, checked (one Error: line naming the option), else $DGX_NUM_SMS, else 132."""
    if given is None:
        return _default_num_sms()
    return problems.check_num_sms(given, "--num-sms")


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=dgx.__version__, prog_name="dgx")
def main() -> None:
    """dgx: FP8 GEMM kernels for NVIDIA Hopper with DeepSeek-V3 fine-grained scaling."""
    warnings.showwarning = _show_warning


# --- info -----------------------------------------------------------------------------------------


def collect_info() -> dict:
    """Versions, devices, the cache and the environment, as a JSON-able dict (no GPU needed)."""
    from dgx import compiler, runtime

    info: dict = {
        "dgx": dgx.__version__,
        "python": platform.python_version(),
        "cuda_bindings": _dist_version("cuda-bindings"),
    }
    try:
        info["nvrtc"] = ".".join(str(x) for x in compiler.nvrtc_version())
    except Exception as exc:
        info["nvrtc"] = None
        info["nvrtc_error"] = f"{type(exc).__name__}: {exc}"
    version = runtime.driver_version()
    info["driver"] = f"{version // 1000}.{version % 1000 // 10}" if version else None
    gpus = []
    for ordinal in range(runtime.device_count()):
        try:
            d = runtime.device_info(ordinal)
        except Exception as exc:
            gpus.append({"index": ordinal, "error": f"{type(exc).__name__}: {exc}"})
            continue
        gpus.append(
            {
                "index": ordinal,
                "name": d.name,
                "sms": d.num_sms,
                "compute_capability": f"{d.compute_capability[0]}.{d.compute_capability[1]}",
                "arch": d.arch,
            }
        )
    info["gpus"] = gpus
    info["cache_entries"] = 0
    try:
        root = env.cache_root()
    except Exception as exc:  # a relative DGX_CACHE_DIR: the environment section says so too
        root = None
        info["cache_root"] = os.environ.get("DGX_CACHE_DIR")
        info["cache_entries"] = None
        info["cache_error"] = str(exc)
    if root is not None:
        info["cache_root"] = str(root)
        if root.exists():
            try:
                from dgx.cache import KernelCache

                info["cache_entries"] = len(KernelCache(root).entries())
            except Exception as exc:
                info["cache_entries"] = None
                info["cache_error"] = str(exc)
        else:
            why = env.unwritable_reason(root)
            if why is not None:
                info["cache_entries"] = None
                info["cache_error"] = f"it cannot be created: {why}"
    try:
        from dgx import sass_tools
        info["nvdisasm"] = sass_tools.nvdisasm_path()
    except Exception:
        info["nvdisasm"] = None
    try:
        from dgx import jit

        info["install"] = jit.install_summary()
    except Exception as exc:
        info["install"] = None
        info["install_error"] = user_errors.user_message(exc) or f"{type(exc).__name__}: {exc}"
    info["env"] = {
        v.name: {"value": os.environ.get(v.name), "default": v.default, "help": v.help} for v in env.VARIABLES
    }
    for name, problem in env.problems().items():
        info["env"][name]["error"] = problem
    for name, var in info["env"].items():
        origin = env.source(name)
        if origin is not None and origin != name:  # set through one of DeepGEMM's variables
            var["source"] = origin
            var["value"] = str(env.dump_dir()) if name == "DGX_JIT_DUMP_DIR" else os.environ.get(origin)
    info["deep_gemm_env"] = env.deep_gemm_variables()
    return info


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info(as_json: bool) -> None:
    """Versions, GPUs, the kernel cache and dgx's environment variables."""
    data = collect_info()
    if as_json:
        _emit_json(data)
        return
    rows = [
        ("dgx", data["dgx"]),
        ("python", data["python"]),
        ("cuda-bindings", data["cuda_bindings"] or "not installed"),
        ("NVRTC", data["nvrtc"] or f"unavailable ({data.get('nvrtc_error')})"),
        ("driver", data["driver"] or "none"),
    ]
    if data["gpus"]:
        for g in data["gpus"]:
            if "error" in g:
                rows.append((f"GPU {g['index']}", g["error"]))
            else:
                rows.append((f"GPU {g['index']}", f"{g['name']}, {g['sms']} SMs, {g['arch']}"))
    else:
        rows.append(("GPU", "none"))
    entries = data["cache_entries"]
    cache_note = f"{entries} entries" if entries is not None else f"unusable: {data.get('cache_error')}"
    rows.append(("cache", f"{data['cache_root']} ({cache_note})"))
    rows.append(("nvdisasm", data["nvdisasm"] or "none (pip install nvidia-cuda-nvdisasm)"))
    inst = data.get("install")
    rows.append(
        (
            "kernel keys",
            f"dgx {inst['dgx']}, NVRTC {inst['nvrtc']}, {inst['arch']}, fingerprint {inst['fingerprint']}"
            if inst
            else f"unavailable ({data.get('install_error')})",
        )
    )
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        click.echo(f"{name.ljust(width)}  {value}")
    click.echo("environment:")
    for name, var in data["env"].items():
        value = var["value"]
        shown = "(unset)" if value is None else repr(value)
        flag = f"  INVALID: {var['error']}" if "error" in var else ""
        origin = f" (from {var['source']})" if "source" in var else ""
        click.echo(f"  {name} = {shown}{origin}  [default: {var['default'] or 'empty'}]{flag}")
    if data["deep_gemm_env"]:
        click.echo("DeepGEMM's variables (a DGX_* value wins):")
        for var in data["deep_gemm_env"]:
            click.echo(f"  {var['name']} = {var['value']!r}  {var['effect']}")


# --- cache ----------------------------------------------------------------------------------------


@main.group()
def cache() -> None:
    """The on-disk kernel cache (DGX_CACHE_DIR)."""


@cache.command("path")
def cache_path() -> None:
    """Print the cache root."""
    click.echo(str(env.cache_root()))


def _entry_rows(kc) -> list[dict]:
    """One row per cache entry, from its manifest alone (the kernel name is the manifest's ``name``;
    entries written before dgx recorded it have none: ``None``, shown as ``?``)."""
    rows = []
    for e in kc.entries():
        rows.append(
            {
                "key": e.key,
                "kernel": e.name,
                "size": e.size,
                "created": datetime.datetime.fromtimestamp(e.created, datetime.timezone.utc).isoformat(
                    timespec="seconds"
                ),
                "compiler": e.compiler,
                "_created_ts": e.created,
            }
        )
    return rows


@cache.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of entries.")
def cache_list(as_json: bool) -> None:
    """List the cached kernels: key, kernel name, size, creation time."""
    kc = _kernel_cache()
    rows = _entry_rows(kc)
    if as_json:
        _emit_json([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
        return
    if not rows:
        click.echo(f"no kernels in {kc.root}")
        return
    click.echo(f"{'KEY':16}  {'SIZE':>10}  {'CREATED':19}  KERNEL")
    for r in rows:
        size = _human_bytes(r["size"])
        click.echo(f"{r['key'][:16]}  {size:>10}  {_when(r['_created_ts'])}  {r['kernel'] or '?'}")
    total = sum(r["size"] for r in rows)
    click.echo(f"{len(rows)} kernels, {_human_bytes(total)} in {kc.root}")


@cache.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def cache_verify(as_json: bool) -> None:
    """Check every entry's manifest and sha256; remove the corrupt ones."""
    from dgx import install

    kc = _kernel_cache()
    report = kc.verify(remove=True)
    ok = set(report.ok)
    entries = [e for e in kc.entries() if e.key in ok]
    foreign = install.foreign_compilers(e.compiler for e in entries)
    data = {
        "ok": len(report.ok),
        "removed": len(report.corrupt) if report.removed else 0,
        "corrupt": [{"key": k, "reason": report.reasons.get(k, "")} for k in report.corrupt],
        "compiler": install.compiler_label(),
        "other_compiler": dict(sorted(((c or "unknown"), n) for c, n in foreign.items())),
    }
    if as_json:
        _emit_json(data)
        return
    verb = "removed" if report.removed else "corrupt (left in place: the cache is read-only)"
    for item in data["corrupt"]:
        click.echo(f"{verb} {item['key'][:16]}: {item['reason']}")
    note = install.mismatch_note(foreign, len(entries), str(kc.root))
    if note:
        click.echo(f"note: {note}")
    tail = f"{data['removed']} removed" if report.removed else f"{len(report.corrupt)} corrupt, not removed (read-only)"
    click.echo(f"{data['ok']} ok, {tail} ({kc.root})")


@cache.command("clear")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def cache_clear(yes: bool) -> None:
    """Remove every cached kernel."""
    kc = _kernel_cache()
    count = len(kc.entries())
    if not yes:
        click.confirm(f"Remove all {count} kernels from {kc.root}?", abort=True)
    kc.require_writable("remove its kernels")
    removed = kc.clear()
    click.echo(f"removed {removed} kernels from {kc.root}")


@cache.command("export")
@click.argument("file", type=click.Path(dir_okay=False))
def cache_export(file: str) -> None:
    """Write every verified entry to FILE (.tar.gz, .tgz, .tar.xz or .txz)."""
    from dgx.cache import CacheError, export_bundle

    from dgx import jit

    kc = _kernel_cache()
    try:
        written = export_bundle(kc, file, metadata={"built_by": jit.install_summary()})
    except OSError as exc:
        raise click.ClickException(f"cannot export to {file}: {exc.strerror or exc}: {exc.filename or file}") from None
    except (ValueError, CacheError) as exc:
        raise click.ClickException(f"cannot export to {file}: {exc}") from None
    click.echo(f"exported {_plural(written, 'kernel')} to {file}")


@cache.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
def cache_import(file: str) -> None:
    """Import a bundle written by `dgx cache export`: all entries verified first, or nothing."""
    from dgx.cache import BundleError, CacheError, import_bundle

    from dgx import install

    kc = _kernel_cache()
    try:
        report = import_bundle(kc, file)
    except BundleError as exc:
        raise click.ClickException(str(exc)) from None
    except (OSError, CacheError) as exc:
        raise click.ClickException(f"cannot import {file}: {exc}; nothing was imported") from None
    built_by = (report.metadata or {}).get("built_by")
    if isinstance(built_by, dict) and built_by.get("nvrtc") not in (None, install.nvrtc_version()):
        click.echo(
            f"note: this bundle was built with NVRTC {built_by.get('nvrtc')} (dgx {built_by.get('dgx')}), "
            f"this install loads NVRTC {install.nvrtc_version()}",
            err=True,
        )
    note = install.mismatch_note(
        install.foreign_compilers(report.compilers.values()), len(report.compilers), f"bundle {file}"
    )
    if note:
        click.echo(f"note: {note}", err=True)
    click.echo(
        f"imported {len(report.imported)} kernels, skipped {len(report.skipped)} already present, into {kc.root}"
    )


# --- inspect --------------------------------------------------------------------------------------


def _sass_tools(needed: str):
    try:
        from dgx import sass_tools
    except Exception as exc:
        raise click.ClickException(f"dgx inspect needs sass_tools, which failed to import: {exc}") from None
    if not hasattr(sass_tools, needed):
        raise click.ClickException(f"dgx inspect needs sass_tools.{needed}, which this install of sass_tools lacks")
    return sass_tools


def _resolve_key(kc, given: str) -> str:
    given = given.strip().lower()
    if len(given) < 8:
        raise click.ClickException(f"--key: expected at least 8 hex digits of a cache key, got {given!r}")
    matches = [e.key for e in kc.entries() if e.key.startswith(given)]
    if not matches:
        raise click.ClickException(f"--key: no kernel in {kc.root} has a key starting with {given} (see dgx cache list)")
    if len(matches) > 1:
        raise click.ClickException(f"--key: {given} matches {len(matches)} kernels; give more digits")
    return matches[0]


def _report_dict(report) -> dict:
    data = report.to_json() if hasattr(report, "to_json") else report
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, dict):
        raise click.ClickException(f"sass_tools returned a {type(data).__name__} report; expected an object")
    return data


def _print_report(r: dict) -> None:
    def show(label, value):
        click.echo(f"  {label:<17} {value}")

    click.echo(f"kernel {r.get('kernel')}")
    show("registers", r.get("registers"))
    show("shared memory", f"{r.get('shared_bytes')} bytes static")
    show("local memory", f"{r.get('local_bytes')} bytes, {r.get('spill_instructions')} LDL/STL")
    show("QGMMA", r.get("qgmma"))
    if r.get("hgmma"):  # BF16 kernels (BF16 GEMMs, einsums): their tensor-core instructions
        show("HGMMA", r.get("hgmma"))
    runs = r.get("ffma_runs")
    if isinstance(runs, (list, tuple)):
        lengths = [x.get("length", x) if isinstance(x, dict) else x for x in runs]
        shown = str(len(runs))
        if runs:
            shown += f" (lengths {', '.join(map(str, lengths[:16]))}{', ...' if len(lengths) > 16 else ''})"
        if "ffma_interleaved_runs" in r:
            shown += f"; {r['ffma_interleaved_runs']} interleaved"
    else:
        shown = runs
    show("FFMA runs", shown)
    show("yield bits set", r.get("ffma_yield_set"))
    hist = r.get("histogram") or {}
    if isinstance(hist, dict) and hist:
        top = sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
        total = sum(hist.values())
        show("instructions", f"{total} ({', '.join(f'{op} {n}' for op, n in top)}{', ...' if len(hist) > 12 else ''})")


@main.command()
@click.option("--cubin", "cubin_path", type=click.Path(exists=True, dir_okay=False), help="A cubin file.")
@click.option("--key", help="A cached kernel (a unique prefix of its key, as `dgx cache list` shows).")
@click.option("--gemm", nargs=3, type=click.IntRange(min=1), metavar="M N K", help="The kernel the heuristics pick.")
@click.option("--kind", type=click.Choice(INSPECT_KINDS), default="dense", show_default=True)
@click.option("--groups", type=click.IntRange(min=1), default=1, show_default=True,
              help="Groups of a grouped kind (with --gemm, M is M_sum for contiguous and its prefix-sum variant, rows per group for masked).")
@click.option("--num-sms", type=click.IntRange(min=1), default=None, help="SMs to plan for [default: $DGX_NUM_SMS or 132].")
@click.option("--heads", type=int, default=64, show_default=True, help="MQA-logits kinds: query heads (32 or 64).")
@click.option("--head-dim", type=int, default=128, show_default=True, help="MQA-logits kinds: head dim (32, 64, 128).")
@click.option("--next-n", type=int, default=1, show_default=True, help="paged_mqa_logits: query tokens per sequence.")
@click.option("--epilogue", default=None, metavar="TAG",
              help="FP8 GEMM kinds: a fused epilogue, e.g. fp8, fp8_ue8m0, fp8_swiglu_clamp_rw_alpha_packed, bf16_alpha.")
@click.option("--arch", default=warmup_mod.DEFAULT_ARCH, show_default=True)
@click.option("--sass", is_flag=True, help="Print the disassembly.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of per-kernel reports.")
def inspect(cubin_path, key, gemm, kind, groups, num_sms, heads, head_dim, next_n, epilogue, arch, sass,
            as_json) -> None:
    """Registers, shared/local memory, spills, QGMMA and FFMA interleaving of a kernel (no GPU needed).

    A kind's kernel comes from the options that kind reads (the GEMM kinds: --gemm M N K, --groups, --num-sms; the
    MQA-logits kinds: --heads, --head-dim, --next-n); or give --cubin or --key."""
    ctx = click.get_current_context()
    chosen = families.kind(kind)
    values = {"gemm": gemm, "groups": groups, "num_sms": num_sms, "heads": heads, "head_dim": head_dim,
              "next_n": next_n, "epilogue": epilogue}
    given = {name for name in values if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    sources = [name for name, v in (("--cubin", cubin_path), ("--key", key)) if v]
    kind_flags = [flag for name, flag in (("kind", "--kind"), ("arch", "--arch"))
                  if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if sources and (given or kind_flags):
        raise click.UsageError(
            f"expected {sources[0]} alone or the options of --kind {kind}; got {sources[0]} with "
            f"{', '.join([families.base.INSPECT_OPTIONS[n].flag for n in sorted(given)] + kind_flags)} "
            "(it inspects a built kernel as it is)")
    if len(sources) > 1:
        raise click.UsageError(f"expected one of --cubin, --key; got {', '.join(sources)}")
    if not sources:
        unused = sorted(given - set(chosen.inspect_options))
        if unused:
            raise click.UsageError(
                f"--kind {kind} reads {', '.join(families.base.INSPECT_OPTIONS[n].flag for n in chosen.inspect_options)}; "
                f"got {', '.join(families.base.INSPECT_OPTIONS[n].flag for n in unused)}")
        if "gemm" in chosen.inspect_options and gemm is None:
            raise click.UsageError("expected exactly one of --cubin, --key, --gemm; got none")
    if sass and as_json:
        raise click.UsageError("expected --sass or --json, got both")
    env.check()
    problems.check_arch(arch)
    if num_sms is not None:
        problems.check_num_sms(num_sms, "--num-sms")
    header = None
    if cubin_path:
        with open(cubin_path, "rb") as f:
            cubin = f.read()
    elif key:
        kc = _kernel_cache()
        full = _resolve_key(kc, key)
        cubin = kc.load(full)
        if cubin is None:
            raise click.ClickException(f"--key: the entry {full} failed verification and was removed")
        header = f"cache entry {full}"
    else:
        cubin, header = _kind_cubin(chosen, values, _num_sms(num_sms), arch)
    if sass:
        tools = _sass_tools("disassemble")
        try:
            text = tools.disassemble(cubin)
        except Exception as exc:
            raise click.ClickException(f"cannot disassemble the cubin: {exc}") from None
        if header:
            click.echo(header)
        click.echo(text.rstrip("\n"))
        return
    tools = _sass_tools("analyze_cubin")
    try:
        reports = [_report_dict(r) for r in tools.analyze_cubin(cubin)]
    except click.ClickException:
        raise
    except Exception as exc:
        raise click.ClickException(f"cannot analyze the cubin: {type(exc).__name__}: {exc}") from None
    if as_json:
        _emit_json(reports)
        return
    if header:
        click.echo(header)
    for r in reports:
        _print_report(r)


def _kind_cubin(chosen, values: dict, num_sms: int, arch: str) -> tuple[bytes, str]:
    """The kernel the options select for `chosen` (a dgx.families Kind), compiled for `arch`, and its header line."""
    from dgx import jit
    from dgx.errors import DgxError

    try:
        found = chosen.inspect(values, num_sms, arch)
        cubin = jit.get_cubin(found.source, arch)
    except (ValueError, DgxError) as exc:
        raise click.ClickException(str(exc)) from None
    return cubin, found.header


# --- warmup ---------------------------------------------------------------------------------------


class _ProgressLine:
    """A progress line on stderr: one updating line on a terminal, else a line every few seconds."""

    def __init__(self, interval: float = 5.0):
        self.tty = sys.stderr.isatty()
        self.interval = interval
        self.last = 0.0

    def show(self, done: int, total: int, elapsed: float, eta: float | None, text: str) -> None:
        eta_text = "" if eta is None or done >= total else f", ETA {int(eta) // 60}:{int(eta) % 60:02d}"
        line = f"{text}, {elapsed:.1f} s{eta_text}"
        if self.tty:
            width = 30
            filled = width * done // max(total, 1)
            click.echo(f"\r  [{'#' * filled}{'.' * (width - filled)}] {line}   ", nl=done >= total, err=True)
        elif done >= total or elapsed - self.last >= self.interval:
            self.last = elapsed
            click.echo(f"  {line}", err=True)

    def compile(self, p: warmup_mod.Progress) -> None:
        parts = [f"{p.compiled} compiled here"]
        if p.elsewhere:
            parts.append(f"{p.elsewhere} built by another process")
        if p.failed:
            parts.append(f"{p.failed} failed")
        self.show(p.done, p.total, p.elapsed, p.eta, f"{p.done}/{p.total} done ({', '.join(parts)})")

    def enumerate(self, p: warmup_mod.PlanProgress) -> None:
        self.show(p.done, p.total, p.elapsed, p.eta, f"enumerating: {p.done}/{p.total} M values asked")


def _on_interrupt(running: int) -> None:
    click.echo(
        f"\ndgx warmup: interrupted: no new compiles; waiting for the {_plural(running, 'running compile')} to "
        "finish (interrupt again to stop them now)",
        err=True,
    )


@main.command()
@click.option("--preset", type=click.Choice(warmup_mod.preset_names()), help="A built-in model preset.")
@click.option("--shapes", "shapes_file", type=click.Path(dir_okay=False), help="A JSON shapes file.")
@click.option(
    "--max-m",
    type=click.IntRange(min=1),
    default=warmup_mod.DEFAULT_MAX_M,
    show_default=True,
    help="Largest M to warm for, for entries without their own max_m.",
)
@click.option("--num-sms", type=click.IntRange(min=1), default=None, help="SMs to plan for [default: $DGX_NUM_SMS or 132].")
@click.option("--arch", default=warmup_mod.DEFAULT_ARCH, show_default=True, help="Architecture to compile for (sm_90a only).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Compile processes [default: CPU count].")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object on stdout.")
def warmup(preset, shapes_file, max_m, num_sms, arch, jobs, as_json) -> None:
    """Compile, without a GPU, every kernel the heuristics can pick for the shapes of a preset or file.

    Ctrl-C (or SIGTERM) stops it: no new compiles start, the running ones finish (a second Ctrl-C kills
    them) and what was built stays in the cache."""
    if (preset is None) == (shapes_file is None):
        raise click.UsageError("expected exactly one of --preset NAME or --shapes FILE, got " + ("both" if preset else "neither"))
    env.check()
    problems.check_arch(arch)
    num_sms = _num_sms(num_sms)
    source = f"preset {preset}" if preset else shapes_file
    try:
        warmup_mod.check_warm_max_m(max_m, "--max-m")
        entries = warmup_mod.load_preset(preset) if preset else warmup_mod.load_shapes_file(shapes_file)
        warmup_mod.check_warm_range(entries, max_m, where=f"preset {preset}: " if preset else f"shapes file {shapes_file}: ")
    except (warmup_mod.ShapesFileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    jobs = jobs or os.cpu_count() or 1
    kc = _kernel_cache()
    click.echo(
        f"dgx warmup: {len(entries)} shapes from {source}; M up to {max_m} (unless an entry says), "
        f"{num_sms} SMs, {arch}; cache {kc.root}",
        err=True,
    )
    line = _ProgressLine()
    try:
        the_plan = warmup_mod.recorded_plan(
            entries, max_m=max_m, num_sms=num_sms, arch=arch, jobs=jobs, progress=line.enumerate
        )
    except interrupts.Interrupted as exc:
        click.echo(f"\ndgx warmup: {exc} while enumerating kernels; nothing was compiled", err=True)
        sys.exit(exc.exit_code)
    corrupt_before = kc.stats.corrupt
    missing = sum(1 for pk in the_plan.kernels if not kc.contains(pk.key))
    corrupt = kc.stats.corrupt - corrupt_before
    if missing:
        kc.require_writable(f"build the {_plural(missing, 'missing kernel')} into it")
    if corrupt:
        click.echo(f"dgx warmup: {_plural(corrupt, 'corrupt cache entry', 'corrupt cache entries')} removed; rebuilding", err=True)
    helpers = [pk for pk in the_plan.kernels if pk.helper]
    how = "reusing the plan of an identical warmup" if the_plan.reused else f"{the_plan.seconds:.1f} s to enumerate"
    click.echo(
        f"dgx warmup: {_plural(len(the_plan.kernels), 'distinct kernel')} ({how}), "
        f"{missing} to compile" + (f" with {_plural(min(jobs, missing), 'process', 'processes')}" if missing else ""),
        err=True,
    )
    if helpers:
        click.echo(
            f"dgx warmup: of them, {_plural(len(helpers), 'helper kernel')} any GEMM call can launch, whatever its "
            f"shape: {'; '.join(pk.used_by[0].split(': ', 1)[-1] for pk in helpers)}",
            err=True,
        )
    result = warmup_mod.run(the_plan, jobs=jobs, progress=line.compile, on_interrupt=_on_interrupt)
    for name, error in result.failures:
        click.echo(f"dgx warmup: FAILED {name}:\n{_first_lines(error)}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_json()))
    else:
        elsewhere = f" ({result.built_elsewhere} of them built meanwhile by another process)" if result.built_elsewhere else ""
        click.echo(
            f"dgx warmup: {_plural(result.kernels, 'kernel')}: {result.compiled} compiled, {result.cached} cached"
            f"{elsewhere}, {result.failed} failed in {result.seconds:.1f} s"
        )
    if result.interrupted:
        click.echo(
            f"dgx warmup: interrupted by {result.interrupted}: kept {result.compiled + result.cached} of "
            f"{result.kernels} kernels in the cache ({result.compiled} compiled by this run); {result.not_built} "
            "not built: run the same command again to build them",
            err=True,
        )
        sys.exit(128 + getattr(__import__("signal"), result.interrupted))
    if result.failed:
        sys.exit(1)


# --- bench ----------------------------------------------------------------------------------------


@main.command()
@click.option("--suite", type=click.Choice(BENCH_SUITES), default="all", show_default=True)
@click.option("--shapes", "shapes_file", type=click.Path(dir_okay=False), help="A shapes file (warmup format, plus m).")
@click.option("--peers/--no-peers", default=True, show_default=True, help="Also time the peers (DeepGEMM where a real one imports, cuBLASLt, Triton, BF16; torch for the MQA suites).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True, help="Rerun everything N times.")
@click.option(
    "--timer",
    type=click.Choice(BENCH_TIMERS),
    default="events",
    show_default=True,
    help="events: CUDA events around each call (launch gaps included). kernel: kernel-only GPU time per call "
    "(CUPTI through torch.profiler, the call's kernels summed; the clock of DeepGEMM's published figures).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the results as JSON.")
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write a Markdown table.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write a PNG plot per suite: FILE.png for one suite, FILE-SUITE.png for each of several.")
def bench(suite, shapes_file, peers, repeat, timer, json_path, markdown_path, plot_path) -> None:
    """Benchmark dgx against cuBLASLt, Triton and BF16 on this GPU (needs an NVIDIA GPU)."""
    env.check()
    try:
        from dgx import bench as bench_mod

        entry = bench_mod.main
    except Exception as exc:
        raise click.ClickException(
            f"dgx bench is not available in this install: importing dgx.bench failed ({type(exc).__name__}: {exc})"
        ) from None
    code = entry(
        suite=suite,
        shapes_file=shapes_file,
        peers=peers,
        repeat=repeat,
        json_path=json_path,
        markdown_path=markdown_path,
        plot_path=plot_path,
        timer=timer,
        echo=click.echo,
    )
    sys.exit(int(code or 0))


if __name__ == "__main__":
    main()
