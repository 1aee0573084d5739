"""Plan records (dgx/plan_record.py): a warmup identical to an earlier one reuses its plan instead of enumerating;
anything that could change the plan gives another record key (CPU only, nothing compiled)."""

from __future__ import annotations

import gzip
import json
import os
import stat

import pytest

from dgx import jit, plan_record, warmup

ENTRIES = [
    {"kind": "dense", "n": 256, "k": 256, "max_m": 1024},
    {"kind": "m_grouped_masked", "n": 256, "k": 256, "groups": 2, "max_m": 256},
    {"kind": "mqa_logits", "heads": 32, "head_dim": 64},
]


def _same(a: warmup.Plan, b: warmup.Plan) -> bool:
    return [(k.key, k.source, k.used_by, k.helper) for k in a.kernels] == [
        (k.key, k.source, k.used_by, k.helper) for k in b.kernels
    ]


def test_a_second_identical_plan_is_read_from_its_record(tmp_cache):
    specs = warmup.parse_shapes(ENTRIES)
    first = warmup.recorded_plan(specs)
    assert not first.reused and _same(first, warmup.plan(specs))
    records = list((tmp_cache / plan_record.PLANS_DIR).iterdir())
    assert [p.name for p in records] == [warmup.plan_record_key(specs) + ".json.gz"]
    assert stat.S_IMODE(os.stat(records[0]).st_mode) & 0o077 == 0  # private, as the cache is

    second = warmup.recorded_plan(specs)
    assert second.reused and _same(second, first)
    # A note is not part of what decides the kernels: the record still applies.
    noted = warmup.parse_shapes([dict(ENTRIES[0], note="another note"), *ENTRIES[1:]])
    assert warmup.recorded_plan(noted).reused


@pytest.mark.parametrize(
    "change",
    [
        {"entries": ENTRIES[:2]},
        {"entries": [dict(ENTRIES[0], max_m=1025), *ENTRIES[1:]]},
        {"entries": [ENTRIES[1], ENTRIES[0], ENTRIES[2]]},  # the plan's order (and its used_by) follows the entries'
        {"max_m": 4096},
        {"num_sms": 78},
    ],
)
def test_other_arguments_have_another_record(tmp_cache, change):
    warmup.recorded_plan(warmup.parse_shapes(ENTRIES))
    entries = warmup.parse_shapes(change.pop("entries", ENTRIES))
    again = warmup.recorded_plan(entries, **change)
    assert not again.reused and _same(again, warmup.plan(entries, **change))


def test_code_or_key_inputs_changed_give_another_key(monkeypatch):
    specs = warmup.parse_shapes(ENTRIES)
    key = warmup.plan_record_key(specs)
    assert warmup.plan_record_key(specs) == key
    monkeypatch.setattr(plan_record, "code_digest", lambda: "0" * 64)  # an edited heuristic, renderer, header ...
    assert warmup.plan_record_key(specs) != key
    monkeypatch.undo()
    monkeypatch.setattr(jit, "key_fingerprint", lambda arch: "another NVRTC")  # another NVRTC, options, SASS pass
    assert warmup.plan_record_key(specs) != key


def test_code_digest_covers_every_package_and_no_path():
    digest = plan_record.code_digest()
    assert len(digest) == 64 and digest == plan_record.code_digest()
    assert set(plan_record._CODE_PACKAGES) == {"dgx", "dgx.ptx", "dgx.cache", "dgx.sass_tools"}


@pytest.mark.parametrize("damage", ["truncate", "edit", "other key", "garbage"])
def test_a_damaged_record_is_ignored_and_rewritten(tmp_cache, damage):
    specs = warmup.parse_shapes(ENTRIES)
    fresh = warmup.recorded_plan(specs)
    path = plan_record.record_path(tmp_cache, warmup.plan_record_key(specs))
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw))
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "edit":  # a kernel's source changed behind the checksum's back
        data["kernels"][0]["source"] += "\n// edited"
        path.write_bytes(gzip.compress(json.dumps(data).encode()))
    elif damage == "other key":
        data["key"] = "f" * 64
        path.write_bytes(gzip.compress(json.dumps(data).encode()))
    else:
        path.write_bytes(gzip.compress(b"\xff\x00 not json"))
    again = warmup.recorded_plan(specs)
    assert not again.reused and _same(again, fresh)
    assert warmup.recorded_plan(specs).reused  # rewritten whole


class _ReadOnlyCache:
    def __init__(self, root):
        self.root, self.read_only = root, True


def test_a_read_only_cache_is_read_not_written(tmp_cache, monkeypatch):
    specs = warmup.parse_shapes(ENTRIES)
    warmup.recorded_plan(specs)  # recorded while writable
    monkeypatch.setattr(jit, "kernel_cache", lambda: _ReadOnlyCache(tmp_cache))
    assert warmup.recorded_plan(specs).reused
    other = warmup.parse_shapes(ENTRIES[:1])
    assert not warmup.recorded_plan(other).reused
    assert not plan_record.record_path(tmp_cache, warmup.plan_record_key(other)).exists()


def test_only_the_most_recently_used_records_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_record, "KEEP_RECORDS", 3)
    keys = [f"{i:x}" * 64 for i in range(4)]
    for i, key in enumerate(keys[:3]):
        assert plan_record.save(tmp_path, key, [], float(i))
        os.utime(plan_record.record_path(tmp_path, key), (1000 + i, 1000 + i))  # used long ago, 0 first
    assert plan_record.load(tmp_path, keys[0]) == ([], 0.0)  # used again: the most recent now
    assert plan_record.save(tmp_path, keys[3], [], 3.0)
    kept = {p.name.split(".")[0] for p in (tmp_path / plan_record.PLANS_DIR).iterdir()}
    assert kept == {keys[0], keys[2], keys[3]}


def test_save_into_a_missing_folder_reports_false(tmp_path):
    assert plan_record.save(tmp_path / "no" / "such" / "cache", "a" * 64, [], 0.0) is False
    assert plan_record.load(tmp_path / "no" / "such" / "cache", "a" * 64) is None


def test_warmup_reuses_the_plan_and_strict_mode_finds_its_kernels(tmp_cache, fresh_jit, monkeypatch):
    """warmup() goes through the record: the second run enumerates nothing and compiles nothing."""
    specs = warmup.parse_shapes([{"kind": "dense", "n": 256, "k": 256, "max_m": 64}])
    first = warmup.warmup(specs, jobs=1)
    assert first.compiled == first.kernels == 3 and first.failed == 0

    def no_enumeration(*args, **kwargs):
        raise AssertionError("enumerated again")

    monkeypatch.setattr(warmup, "plan", no_enumeration)
    second = warmup.warmup(specs, jobs=1)
    assert (second.kernels, second.compiled, second.cached) == (3, 0, 3)
