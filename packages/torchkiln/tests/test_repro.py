"""Repro scripts and the minifier, on a deliberately broken lowering: ``aten.mul``'s lowering is
wrapped so its body raises when it is run. The graph falls back to eager (results
still match), a repro script is written; run on its own in a subprocess (with the same broken
lowering installed) it reproduces the failure, and without it it passes. The minifier shrinks
the graph to the one multiplication. A silently wrong lowering (the product negated) is caught
by the script written on request from the debug dir, as an accuracy failure, and minified too."""

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torchkiln
from torchkiln_loop_ir import LOWERINGS

BREAKER = textwrap.dedent('''
    """Breaks aten.mul's lowering: its body fails when it is recorded for the scheduler (a
    buffer's LoopBody) or a code generator runs it (the lowering's own count of its ops runs it
    fine, so the failure is the graph's, past lowering)."""
    import dataclasses

    import torch
    from torchkiln_loop_ir import LOWERINGS, ops
    from torchkiln_loop_ir.ops import current_ops_handler


    def _fail(value):
        handler = type(current_ops_handler())  # kernels run bodies under a simplifying wrapper
        if handler.__module__.startswith("torchkiln_codegen") or handler.__name__ in (
                "_SimplifyingHandler", "_Recording"):
            raise RuntimeError("torchkiln_no_such_op: a deliberately broken lowering of aten.mul")
        return value


    def broken(original):
        def lowering(ctx, *args, **kwargs):
            value = original(ctx, *args, **kwargs)
            inner = value.inner_fn
            return dataclasses.replace(value, inner_fn=lambda index: _fail(inner(index)))
        return lowering


    def wrong(original):
        """A silently wrong lowering: the product negated (tanh of the sum then flips sign,
        where a shift would vanish in tanh's saturation)."""
        def lowering(ctx, *args, **kwargs):
            value = original(ctx, *args, **kwargs)
            inner = value.inner_fn
            return dataclasses.replace(
                value, inner_fn=lambda index: ops.neg(inner(index)))
        return lowering


    def install(kind="broken"):
        make = broken if kind == "broken" else wrong
        LOWERINGS[torch.ops.aten.mul] = make(LOWERINGS[torch.ops.aten.mul])
''')


@pytest.fixture
def breaker(tmp_path, monkeypatch):
    """The broken lowering, installed in this process; its module file for subprocesses."""
    (tmp_path / "breaker.py").write_text(BREAKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import breaker as module

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.mul, module.broken(LOWERINGS[torch.ops.aten.mul]))
    return tmp_path


def _run_script(script, breaker_dir, broken, kind="broken"):
    setup = f"import breaker; breaker.install({kind!r}); " if broken else ""
    code = f"{setup}import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=breaker_dir,
        env={
            **__import__("os").environ,
            "PYTHONPATH": f"{breaker_dir}:" + __import__("os").environ.get("PYTHONPATH", ""),
        },
    )


def f(x, y, idx):
    a = torch.relu(x) + y
    b = a * 2.0
    c = b.sum(-1) + x[idx].sum()
    return torch.tanh(c), a.exp()


def _inputs():
    return torch.randn(4, 8), torch.randn(4, 8), torch.tensor([0, 3])


def test_a_fallback_writes_a_repro_that_reproduces_on_its_own(breaker, tmp_path):
    dump = tmp_path / "dump"
    compiled = torchkiln.compile(f, options={"debug_dir": str(dump)})
    args = _inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compiled(*args)
    for g, w in zip(got, f(*args)):  # the graph ran eagerly: still right
        torch.testing.assert_close(g, w)
    (message,) = [str(w.message) for w in caught if "torchkiln" in str(w.message)]
    assert "torchkiln_no_such_op" in message and "repro: python " in message
    (fallback,) = torchkiln.report(compiled).eager_fallbacks
    assert fallback.repro == str(dump / "f_0" / "repro.py")
    assert "torchkiln_no_such_op" in (dump / "f_0" / "failure.txt").read_text()

    broken = _run_script(fallback.repro, breaker, broken=True)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "reproduced: RuntimeError" in broken.stdout and "torchkiln_no_such_op" in broken.stdout
    fixed = _run_script(fallback.repro, breaker, broken=False)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "passed: torchkiln matches eager" in fixed.stdout


def test_without_a_debug_dir_the_repro_goes_under_the_cache(breaker, tmp_path):
    compiled = torchkiln.compile(f, options={"cache_dir": str(tmp_path / "cache")})
    args = _inputs()
    with pytest.warns(UserWarning, match="repro: python .*cache.*repro.*f_0.*repro.py"):
        got = compiled(*args)
    torch.testing.assert_close(got[0], f(*args)[0])
    (fallback,) = torchkiln.report(compiled).eager_fallbacks
    assert fallback.repro.startswith(str(tmp_path / "cache" / "repro"))


def test_strict_mode_names_the_repro(breaker, tmp_path):
    compiled = torchkiln.compile(f, options={"strict": True, "debug_dir": str(tmp_path)})
    with pytest.raises(torchkiln.BackendCompilerFailed, match=r"repro: python .*f_0.repro\.py"):
        compiled(*_inputs())


def test_the_minifier_shrinks_the_graph_to_the_broken_node(breaker, tmp_path):
    from torchkiln.minify import minify
    from torchkiln.repro import load_script

    compiled = torchkiln.compile(f, options={"debug_dir": str(tmp_path)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(*_inputs())
    script = tmp_path / "f_0" / "repro.py"
    lines = []
    small = minify(script, log=lines.append)
    assert small == tmp_path / "f_0" / "repro_min.py"
    module = load_script(small)
    gm = module.make_graph()
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    assert len(ops) == 1 and "mul" in str(ops[0].target), gm.code
    assert module.OPTIONS["max_fusions"] == 0  # the failure needs no fusion
    assert any("9 -> 1 nodes" in line for line in lines), lines
    # the minified script still reproduces on its own, and passes once the lowering is fixed
    assert _run_script(small, breaker, broken=True).returncode == 1
    assert _run_script(small, breaker, broken=False).returncode == 0


def test_the_minifier_refuses_a_script_that_passes(tmp_path):
    from torchkiln.bench.cli import main

    def g(x):
        return torch.sin(x) * 2.0

    compiled = torchkiln.compile(g, options={"debug_dir": str(tmp_path), "strict": True})
    x = torch.randn(3, 3)
    torch.testing.assert_close(compiled(x), g(x))
    assert main(["repro", str(tmp_path / "g_0")]) == 0
    assert main(["minify", str(tmp_path / "g_0" / "repro.py")]) == 2


def test_a_wrong_result_is_reproduced_and_minified_from_the_debug_dir(tmp_path, monkeypatch):
    """The compiled graph is wrong (nothing in torchkiln can see that at run time: this is what
    the user notices); ``python -m torchkiln repro`` on its debug-dir folder writes a script that
    reports the mismatch, and the minifier keeps the accuracy failure down to the mul."""
    from torchkiln.bench.cli import main
    from torchkiln.minify import minify
    from torchkiln.repro import load_script

    (tmp_path / "breaker.py").write_text(BREAKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import breaker as module

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.mul, module.wrong(LOWERINGS[torch.ops.aten.mul]))
    compiled = torchkiln.compile(f, options={"debug_dir": str(tmp_path / "dump"), "strict": True})
    args = _inputs()
    got = compiled(*args)
    assert not torch.allclose(got[0], f(*args)[0])  # the deliberate bug is visible
    folder = tmp_path / "dump" / "f_0"
    assert main(["repro", str(folder)]) == 0
    script = folder / "repro.py"
    wrong = _run_script(script, tmp_path, broken=True, kind="wrong")
    assert wrong.returncode == 1 and "reproduced: accuracy: output 0" in wrong.stdout, wrong.stdout
    assert _run_script(script, tmp_path, broken=False).returncode == 0
    small = load_script(minify(script, log=lambda line: None))
    ops = [n for n in small.make_graph().graph.nodes if n.op in ("call_function", "call_method")]
    assert [str(n.target) for n in ops] == ["<built-in function mul>"], ops
    assert small.check().startswith("accuracy: ")
