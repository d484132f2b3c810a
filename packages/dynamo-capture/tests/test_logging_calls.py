"""Logging calls inside captured code run after the graph (no break), in order, as in eager."""

from __future__ import annotations

import functools
import logging
import warnings

import torch
from torchkiln_dynamo_capture import capture, explain


class Recording:
    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


class OnceLogger(logging.Logger):
    """Like transformers' logger: ``warning_once`` is an lru_cache'd method (one record per message)."""

    @functools.lru_cache(None)  # noqa: B019 - the cache is the point (one warning per message)
    def warning_once(self, *args):
        self.warning(*args)


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}:{record.getMessage()}")


def _logger(name: str, cls=logging.Logger) -> tuple[logging.Logger, Keep]:
    log = cls(name)
    log.setLevel(logging.DEBUG)
    keep = Keep()
    log.addHandler(keep)
    return log, keep


def test_logger_methods_warning_once_and_warnings_warn_keep_one_graph():
    log, keep = _logger("tk_test_logging", OnceLogger)

    def f(x, n):
        y = x.sin() * n
        log.warning_once("config %s is deprecated", "x")
        log.info("scaled by %d, shape %s", n, tuple(y.shape))
        warnings.warn("careful", UserWarning, stacklevel=1)
        log.debug("done")
        return y.cos() + 1

    be = Recording()
    cf = capture(f, be)
    for _ in range(2):
        x = torch.randn(3, 4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = cf(x, 2)
        torch.testing.assert_close(
            got, (x.sin() * 2).cos() + 1
        )  # eager's value, without logging twice
        assert [str(w.message) for w in caught] == ["careful"]
    assert len(be.graphs) == 1 and cf.graph_breaks == []
    # eager's records, per call: warning_once only on the first call
    assert keep.lines == [
        "WARNING:config x is deprecated",
        "INFO:scaled by 2, shape (3, 4)",
        "DEBUG:done",
        "INFO:scaled by 2, shape (3, 4)",
        "DEBUG:done",
    ]


def test_module_level_logging_functions_and_records_match_eager(caplog):
    def f(x):
        y = x * 3
        logging.warning("tripled")  # noqa: LOG015 - the module-level function is what is tested
        return y - 1

    x = torch.randn(5)
    with caplog.at_level(logging.WARNING):
        f(x)
        eager = [r.getMessage() for r in caplog.records]
        caplog.clear()
        cf = capture(f, Recording())
        torch.testing.assert_close(cf(x), f(x))
        assert [r.getMessage() for r in caplog.records] == eager * 2
    assert cf.graph_breaks == []


def test_log_calls_keep_their_order_around_a_print_break(capsys):
    log = logging.getLogger("tk_test_logging_order")
    log.setLevel(logging.INFO)
    log.propagate = False

    class Out(logging.Handler):
        def emit(self, record):
            print(f"log:{record.getMessage()}")

    handler = Out()
    log.addHandler(handler)
    try:

        def f(x):
            y = x + 1
            log.info("first")
            print("second")
            z = y * 2
            log.info("third")
            return z

        x = torch.randn(4)
        f(x)
        eager = capsys.readouterr().out
        be = Recording()
        torch.testing.assert_close(capture(f, be)(x), f(x))
        assert capsys.readouterr().out == eager * 2
        assert len(be.graphs) == 2  # the print is the only break
    finally:
        log.removeHandler(handler)


def test_a_tensor_argument_still_breaks_with_a_reason():
    log, keep = _logger("tk_test_logging_tensor")

    def f(x):
        y = x.exp()
        log.info("value %s", y.sum())
        return y + 1

    x = torch.randn(3)
    info = explain(f)(x)
    assert len(info.breaks) == 1
    assert "arguments not known at capture time" in info.breaks[0].reason
    keep.lines.clear()
    torch.testing.assert_close(capture(f, Recording())(x), f(x))
    assert len(keep.lines) == 2 and keep.lines[0] == keep.lines[1]
