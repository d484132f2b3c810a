"""A damaged code cache is rebuilt by the next process, never loaded.

Each case compiles a function with an indexing kernel on the C++ backend in one process, damages
the cached library or wrapper the way a full disk, an interrupted copy or another tool would
(truncated to half, zeroed, swapped for another kernel's library, garbage), and checks that a
NEW process exits 0 with eager's answer and no eager fallback (before the cache verified its
entries, a truncated kernel.so killed every later process with SIGBUS, exit 135; a zeroed or
swapped one with SIGSEGV; garbage made every later process run eagerly).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torchkiln_codegen_cpp")

CHILD = textwrap.dedent(
    """
    import glob, json, os, sys, warnings
    import torch, torchkiln

    def libraries():  # path -> identity of the file there (a rebuilt entry is a new file)
        paths = glob.glob(os.path.join(os.environ["TORCHKILN_CACHE_DIR"], "cpp", "*", "kernel.so"))
        return {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in paths}

    torch.manual_seed(int(sys.argv[1]))
    x, idx = torch.randn(300), torch.randint(0, 300, (77,))
    made = {}
    for scale in sys.argv[2:]:
        def f(x, idx, scale=float(scale)):  # one library per scale: the constant is in the source
            return torch.sin(x)[idx] * scale + x.sum()

        before = libraries()
        cf = torchkiln.compile(f, options=torchkiln.CompileOptions(codegen="cpp"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback to eager would warn
            out = cf(x, idx)
        torch.testing.assert_close(out, f(x, idx), rtol=1e-5, atol=1e-4)
        report = torchkiln.report(cf)
        assert not report.eager_fallbacks, report.eager_fallbacks
        made[scale] = {"wrapper": report.graphs[0].source_path, "built": sorted(p for p, ident in libraries().items() if before.get(p) != ident)}
    print(json.dumps(made))
    """
)


def _run(tmp_path: Path, seed: int, *scales: str) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script), str(seed), *scales],
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_damaged_libraries_and_wrappers_are_rebuilt_by_the_next_process(tmp_path):
    scales = ["2.5", "-3.0", "0.5", "7.0", "1.5"]
    first = _run(tmp_path, 0, *scales)
    libs = {}
    for scale in scales:
        (libs[scale],) = map(Path, first[scale]["built"])
    good = {scale: lib.read_bytes() for scale, lib in libs.items()}
    # in place, as an interrupted copy or a full disk leaves a file
    libs["2.5"].write_bytes(good["2.5"][: len(good["2.5"]) // 2])
    libs["-3.0"].write_bytes(bytes(len(good["-3.0"])))
    libs["0.5"].write_bytes(good["1.5"])  # another kernel's library (another constant)
    libs["7.0"].write_bytes(b"this is not a library ((\n" * 40)
    wrappers = {scale: Path(first[scale]["wrapper"]) for scale in ("2.5", "0.5")}
    sources = {scale: w.read_text() for scale, w in wrappers.items()}
    wrappers["2.5"].write_text(sources["2.5"][: len(sources["2.5"]) // 2])
    wrappers["0.5"].write_text(
        "def make(kernels, externs, devices):\n    return lambda args: [0]\n"
    )

    second = _run(tmp_path, 1, *scales)  # a new process, new inputs: eager's answers, exit 0
    assert sorted(
        p for scale in ("2.5", "-3.0", "0.5", "7.0") for p in second[scale]["built"]
    ) == sorted(
        str(libs[scale]) for scale in ("2.5", "-3.0", "0.5", "7.0")
    )  # rebuilt, each where it was
    assert second["1.5"]["built"] == []  # the intact entry was reused
    for scale, wrapper in wrappers.items():
        assert wrapper.read_text() == sources[scale]
    _run(tmp_path, 2, *scales)  # and the rebuilt entries serve the process after it
