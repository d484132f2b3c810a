"""The shared code cache: where it lives, verified entries, rebuilds of damaged ones, one build
per key across threads, and generated modules executed only from verified bytes."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pytest
from torchkiln_loop_ir import codecache
from torchkiln_loop_ir.codecache import MANIFEST, CodeCache, cache_root, source_module


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHKILN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "torchkiln"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "torchkiln"
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(str(tmp_path / "opt")) == tmp_path / "opt"  # an options field wins
    assert CodeCache.at("cpp").directory == tmp_path / "env" / "cpp"


def test_host_cpu_features_is_a_stable_digest():
    a = codecache.host_cpu_features()
    assert a == codecache.host_cpu_features() and len(a) == 16 and int(a, 16) >= 0


def _builder(payload: bytes, calls: list[int]):
    def build(tmp: Path) -> None:
        calls.append(1)
        (tmp / "lib.bin").write_bytes(payload)
        (tmp / "src.txt").write_text("source")

    return build


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "zeroed",
        "swapped",
        "garbage",
        "missing file",
        "missing manifest",
        "bad manifest",
    ],
)
def test_a_damaged_entry_is_rebuilt(tmp_path, damage):
    cache = CodeCache(tmp_path / "kind")
    payload = random.Random(0).randbytes(5000)
    calls: list[int] = []
    entry = cache.get_or_build("k1", _builder(payload, calls))
    assert calls == [1] and (entry / "lib.bin").read_bytes() == payload
    manifest = json.loads((entry / MANIFEST).read_text())
    assert sorted(manifest) == ["lib.bin", "src.txt"]
    assert cache.get_or_build("k1", _builder(payload, calls)) == entry and calls == [1]  # a hit

    lib = entry / "lib.bin"
    if damage == "truncated":
        lib.write_bytes(payload[:2500])
    elif damage == "zeroed":
        lib.write_bytes(bytes(5000))
    elif damage == "swapped":
        lib.write_bytes(random.Random(1).randbytes(5000))
    elif damage == "garbage":
        lib.write_text("garbage")
    elif damage == "missing file":
        lib.unlink()
    elif damage == "missing manifest":
        (entry / MANIFEST).unlink()
    else:
        (entry / MANIFEST).write_text("{not json")
    assert cache.verified("k1") is None
    assert cache.get_or_build("k1", _builder(payload, calls)) == entry and calls == [1, 1]
    assert lib.read_bytes() == payload and cache.verified("k1") == manifest
    leftovers = [p.name for p in cache.directory.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == ["k1"]  # no temporary or discarded directories


def test_a_failed_build_leaves_no_entry(tmp_path):
    cache = CodeCache(tmp_path / "kind")

    def fails(tmp: Path) -> None:
        (tmp / "half").write_bytes(b"12")
        raise ValueError("compiler failed")

    with pytest.raises(ValueError, match="compiler failed"):
        cache.get_or_build("k", fails)
    assert not cache.entry_dir("k").exists()
    assert [p.name for p in cache.directory.iterdir() if not p.name.endswith(".lock")] == []


def test_threads_missing_together_build_once(tmp_path):
    cache = CodeCache(tmp_path / "kind")
    calls: list[int] = []
    barrier = threading.Barrier(8)
    entries: list[Path] = []

    def slow_build(tmp: Path) -> None:
        calls.append(1)
        threading.Event().wait(0.2)  # long enough that every thread arrives while it builds
        (tmp / "lib.bin").write_bytes(b"x" * 100)

    def worker() -> None:
        barrier.wait()
        entries.append(cache.get_or_build("k", slow_build))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and len(set(entries)) == 1 and len(entries) == 8


def test_source_module_runs_only_verified_source(tmp_path):
    cache = CodeCache(tmp_path / "wrappers")
    source = "VALUE = 6 * 7\n\ndef make():\n    return VALUE\n"
    module, path = source_module(cache, source, "wrapper.py", "test_codecache_")
    assert module.make() == 42 and path.read_text() == source and path.name == "wrapper.py"
    assert (
        source_module(cache, source, "wrapper.py", "test_codecache_")[0] is module
    )  # once per process
    # damaged on disk (another process's view): the next load rebuilds it before running it
    codecache._modules.clear()
    path.write_text("VALUE = 0\ndef make():\n    return VALUE\n")
    module2, path2 = source_module(cache, source, "wrapper.py", "test_codecache_")
    assert path2 == path and path.read_text() == source and module2.make() == 42
    # a whole entry swapped for another consistent one (its own manifest) is not this source
    other = "def make():\n    return -1\n"
    other_entry = source_module(cache, other, "wrapper.py", "test_codecache_")[1].parent
    codecache._modules.clear()
    for name in ("wrapper.py", MANIFEST):
        (path.parent / name).write_bytes((other_entry / name).read_bytes())
    assert source_module(cache, source, "wrapper.py", "test_codecache_")[0].make() == 42
    assert not list(path.parent.glob("__pycache__"))  # executed from verified bytes, no .pyc


def test_write_atomic_replaces_whole_files(tmp_path):
    target = tmp_path / "d" / "f.txt"
    codecache.write_atomic(target, "one")
    codecache.write_atomic(target, b"two")
    assert target.read_text() == "two" and [p.name for p in target.parent.iterdir()] == ["f.txt"]


def _entry_of(cache: CodeCache, key: str, size: int, used: float) -> None:
    cache.get_or_build(
        key, lambda tmp: (tmp / "lib.bin").write_bytes(random.Random(key).randbytes(size))
    )
    os.utime(cache.entry_dir(key), (used, used))


def test_eviction_removes_least_recently_used_entries_beyond_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(codecache, "EVICT_EVERY", 10**6)  # only the explicit evict() below
    cache = CodeCache(tmp_path / "kind", max_bytes=35_000)
    for i, key in enumerate(["a0", "b1", "c2", "d3", "e4"]):
        _entry_of(cache, key, 10_000, used=1000.0 + i)
    # a hit marks an entry used: "a0", the oldest, becomes the newest
    assert cache.get_or_build("a0", lambda tmp: pytest.fail("a hit must not build"))
    removed = cache.evict()
    assert removed == ["b1", "c2"]  # 5 entries of ~10 kB -> 3 fit under 35 kB
    assert sorted(name for _, _, name in cache.entries()) == ["a0", "d3", "e4"]
    total = sum(size for _, size, _ in cache.entries())
    assert 30_000 <= total <= 35_000
    assert cache.evict() == []  # under the limit: nothing more


def test_eviction_runs_after_builds_and_spares_the_new_and_busy_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(codecache, "EVICT_EVERY", 1)
    cache = CodeCache(tmp_path / "kind", max_bytes=15_000)
    _entry_of(cache, "old", 10_000, used=1000.0)
    _entry_of(cache, "busy", 10_000, used=1001.0)
    with cache._lock("busy"):  # another build of its prefix is in progress: not removed now
        _entry_of(cache, "new", 10_000, used=2000.0)
    names = sorted(name for _, _, name in cache.entries())
    assert names == ["busy", "new"]  # "old" went; "busy" was skipped, "new" is the one just built
    assert cache.evict() == ["busy"]
    # one lock file per key prefix, never one per key
    assert sorted(p.name for p in cache.directory.iterdir() if p.name.endswith(".lock")) == [
        "bu.lock",
        "ne.lock",
        "ol.lock",
    ]


def test_cache_size_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv("TORCHKILN_CACHE_MAX_MB", raising=False)
    assert codecache.cache_size_limit() == codecache.DEFAULT_MAX_BYTES
    monkeypatch.setenv("TORCHKILN_CACHE_MAX_MB", "1.5")
    assert codecache.cache_size_limit() == 3 * 1024**2 // 2
    assert CodeCache.at("cpp", "/nowhere").max_bytes is None  # read at eviction time
    monkeypatch.setenv("TORCHKILN_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="TORCHKILN_CACHE_MAX_MB"):
        codecache.cache_size_limit()
