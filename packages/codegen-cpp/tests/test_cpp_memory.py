"""Indirect loads (gather / embedding), masked loads (cat), atomic-add stores (index_add),
local buffers, and the counter-based random ops."""

from __future__ import annotations

import pytest
import torch
from torchkiln_codegen_cpp import CppBackend
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.ops import ops


@pytest.fixture(scope="module")
def kernels(kit):
    V, D, N = 50, 33, 17
    s0 = index_symbol("s", 0)

    def embedding(x, r):
        i = ops.indirect_indexing(ops.load("idx", x[0]), V)
        ops.store("emb", x[0] * D + x[1], ops.load("weight", i * D + x[1]))

    def cat(x, r):  # out = cat([a (s0,), b (N,)]): a masked load per source
        in_a = ops.lt(ops.index_expr(x[0], torch.int64), ops.index_expr(s0, torch.int64))
        from_a = ops.masked(in_a, lambda: ops.load("a", x[0]), 0.0)
        from_b = ops.masked(ops.logical_not(in_a), lambda: ops.load("b", x[0] - s0), 0.0)
        ops.store("cat", x[0], ops.where(in_a, from_a, from_b))

    def index_add(x, r):  # acc[idx2[x0], :] += src[x0, :]
        i = ops.indirect_indexing(ops.load("idx2", x[0]), V, check=False)
        ops.store("acc", i * D + x[1], ops.load("src", x[0] * D + x[1]), mode="atomic_add")

    def gelu_local(x, r):  # a local buffer read back through the store cache
        v = ops.load("a2", x[0])
        ops.store("t", x[0], ops.mul(v, ops.constant(0.5, torch.float32)))

    def gelu_out(x, r):
        ops.store("g", x[0], ops.add(ops.load("t", x[0]), ops.constant(1.0, torch.float32)))

    def rand(x, r):
        seed = ops.load_seed("seeds", 0)
        off = ops.index_expr(x[0], torch.int64)
        ops.store("u", x[0], ops.rand(seed, off))
        ops.store("z", x[0], ops.randn(seed, off))
        ops.store(
            "k",
            x[0],
            ops.randint64(seed, off, ops.constant(-3, torch.int64), ops.constant(5, torch.int64)),
        )

    buf, spec = kit.buf, kit.spec
    R = 20000
    specs = [
        spec(
            "embedding",
            (N, D),
            (),
            [("loop", [("emb", embedding, False)])],
            [buf("idx", (N,), torch.int64), buf("weight", (V, D)), buf("emb", (N, D))],
            ("idx", "weight"),
            ("emb",),
        ),
        spec(
            "cat",
            (s0 + N,),
            (),
            [("loop", [("cat", cat, False)])],
            [buf("a", (s0,)), buf("b", (N,)), buf("cat", (s0 + N,))],
            ("a", "b"),
            ("cat",),
            size_args=(s0,),
        ),
        spec(
            "index_add",
            (300, D),
            (),
            [("loop", [("acc", index_add, False)])],
            [buf("idx2", (300,), torch.int64), buf("src", (300, D)), buf("acc", (V, D))],
            ("idx2", "src", "acc"),
            ("acc",),
        ),
        spec(
            "local",
            (N,),
            (),
            [("loop", [("t", gelu_local, False), ("g", gelu_out, False)])],
            [buf("a2", (N,)), buf("t", (N,)), buf("g", (N,))],
            ("a2",),
            ("g",),
            local=("t",),
        ),
        spec(
            "rand",
            (R,),
            (),
            [("loop", [("u", rand, False)])],
            [
                buf("seeds", (2,), torch.int64),
                buf("u", (R,)),
                buf("z", (R,)),
                buf("k", (R,), torch.int64),
            ],
            ("seeds",),
            ("u", "z", "k"),
        ),
    ]
    return dict(zip([s.name for s in specs], CppBackend().compile_kernels(specs)))


def test_embedding_gather(kernels):
    idx = torch.randint(0, 50, (17,))
    weight = torch.randn(50, 33)
    out = torch.empty(17, 33)
    kernels["embedding"](idx, weight, out)
    torch.testing.assert_close(out, torch.nn.functional.embedding(idx, weight))


def test_out_of_bounds_indirect_index_raises(kernels):
    idx = torch.randint(0, 50, (17,))
    idx[5] = 50
    with pytest.raises(IndexError, match="out of bounds"):
        kernels["embedding"](idx, torch.randn(50, 33), torch.empty(17, 33))
    # the error belonged to that call: a good call after a bad one succeeds
    idx[5] = 0
    weight = torch.randn(50, 33)
    out = torch.empty(17, 33)
    kernels["embedding"](idx, weight, out)
    torch.testing.assert_close(out, weight[idx])


def test_out_of_bounds_is_reported_to_its_own_call_under_threads(kit):
    """The status word is per call: with 4 threads mixing good and out-of-range indices, exactly
    the out-of-range calls raise and every good call returns eager's rows (a process-wide flag
    let bad calls return data and made good calls on other threads raise)."""
    import threading

    V, D, N = 50, 33, 2000  # long enough that calls on different threads overlap

    def gather(x, r):
        i = ops.indirect_indexing(ops.load("idx", x[0]), V)
        ops.store("out", x[0] * D + x[1], ops.load("weight", i * D + x[1]))

    spec = kit.spec("gather", (N, D), (), [("loop", [("out", gather, False)])],
                    [kit.buf("idx", (N,), torch.int64), kit.buf("weight", (V, D)), kit.buf("out", (N, D))],
                    ("idx", "weight"), ("out",))  # fmt: skip
    kernel = CppBackend().compile_kernels([spec])[0]
    weight = torch.randn(V, D)
    errors: list[str] = []
    barrier = threading.Barrier(4)

    def worker(t: int) -> None:
        barrier.wait()
        for i in range(200):
            idx = torch.randint(0, V, (N,))
            bad = (i + t) % 2 == 0
            if bad:
                idx[(i * 37) % N] = V + i % 4 if i % 4 else -1
            out = torch.empty(N, D)
            try:
                kernel(idx, weight, out)
            except IndexError:
                if not bad:
                    errors.append(f"thread {t} call {i}: a valid call raised IndexError")
                continue
            if bad:
                errors.append(f"thread {t} call {i}: an out-of-range call returned data")
            elif not torch.equal(out, weight[idx]):
                errors.append(f"thread {t} call {i}: wrong rows")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


@pytest.mark.parametrize("na", [0, 1, 7, 257])
def test_masked_cat(kernels, na):
    a, b = torch.randn(na), torch.randn(17)
    out = torch.empty(na + 17)
    kernels["cat"](a, b, out, na)
    torch.testing.assert_close(out, torch.cat([a, b]))


def test_atomic_add_with_duplicate_indices(kernels):
    idx = torch.randint(0, 50, (300,))
    src = torch.randn(300, 33)
    acc = torch.randn(50, 33)
    expected = acc.index_add(0, idx, src)
    kernels["index_add"](idx, src, acc)
    torch.testing.assert_close(acc, expected, rtol=1e-5, atol=1e-5)


def test_local_buffer_is_not_written(kernels):
    a = torch.randn(17)
    g = torch.empty(17)
    kernels["local"](a, g)
    torch.testing.assert_close(g, a * 0.5 + 1)
    assert "out_ptr" in kernels["local"].source and kernels["local"].source.count("] = ") == 1


def test_random_ops_distribution_and_determinism(kernels):
    n = 20000
    seeds = torch.tensor([1234, 0])
    u, z, k = torch.empty(n), torch.empty(n), torch.empty(n, dtype=torch.int64)
    kernels["rand"](seeds, u, z, k)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.005
    assert abs(z.mean().item()) < 0.03 and abs(z.std().item() - 1.0) < 0.03
    assert k.min().item() == -3 and k.max().item() == 4
    assert torch.bincount(k + 3).min().item() > n / 8 * 0.85
    u2, z2, k2 = torch.empty(n), torch.empty(n), torch.empty(n, dtype=torch.int64)
    kernels["rand"](seeds, u2, z2, k2)
    assert torch.equal(u, u2) and torch.equal(z, z2) and torch.equal(k, k2)
    kernels["rand"](torch.tensor([99, 0]), u2, z2, k2)
    assert not torch.equal(u, u2)
