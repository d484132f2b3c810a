"""Why tests/test_training_ops.py::test_max_pool2d_backward_with_dynamic_sizes[cpp] saw 3
graphs on the GPU machine (Python 3.12, torch 2.11) and 2 on CI's (3.11, torch 2.13)."""

import faulthandler
import logging

import torch
import torch.nn.functional as F
import torchkiln

faulthandler.dump_traceback_later(100, exit=True)
logging.basicConfig(level=logging.WARNING)
for name in ("torchkiln.recompiles", "torchkiln.guards", "torchkiln_dynamo_capture"):
    logging.getLogger(name).setLevel(logging.DEBUG)


def f(t):
    return F.max_pool2d(t.relu(), 3, 2, 1)


options = {"codegen": "cpp", "strict": True, "loop_ir": {"max_pool_backward": "generated"}}
compiled = torchkiln.compile(f, dynamic=True, options=options)
for shape in [(2, 4, 11, 9), (3, 4, 14, 17), (1, 4, 8, 8)]:
    x1 = torch.randn(shape, requires_grad=True)
    out = compiled(x1)
    out.backward(torch.randn_like(out))
    r = torchkiln.report(compiled)
    print(
        shape, len(r.graphs), [(g.name if hasattr(g, "name") else "", g.kernels) for g in r.graphs]
    )
r = torchkiln.report(compiled)
print("recompiles:", getattr(r, "recompiles", None))
