"""The TORCHKILN_LOGS registry: names validated, ``all`` expanded, output on the artifact's logger."""

import inspect
import logging

import pytest
import torch
from torchkiln_guards import LocalSource, TensorMatch, compile_guards
from torchkiln_guards.logs import (
    ARTIFACTS,
    UnknownLogName,
    check_log_names,
    enabled,
    logger,
    requested,
)


@pytest.fixture(autouse=True)
def _restore_loggers():
    """Turning an artifact on sets its logger to INFO with a stderr handler; undo that so later
    tests (which count log records) see the loggers as they were."""
    saved = {n: (logger(n).level, list(logger(n).handlers)) for n in ARTIFACTS}
    yield
    for n, (level, handlers) in saved.items():
        logger(n).setLevel(level)
        logger(n).handlers[:] = handlers


def test_unknown_name_is_an_error_listing_the_valid_names(monkeypatch):
    monkeypatch.setenv("TORCHKILN_LOGS", "guards,output_cod")
    with pytest.raises(UnknownLogName) as info:
        check_log_names()
    message = str(info.value)
    assert "'output_cod'" in message
    for name in ARTIFACTS:
        assert name in message
    assert isinstance(info.value, ValueError)


def test_names_all_and_plus_prefix(monkeypatch):
    monkeypatch.delenv("TORCHKILN_LOGS", raising=False)
    assert requested() == frozenset() and not enabled("guards")
    monkeypatch.setenv("TORCHKILN_LOGS", " +guards , recompiles ")
    assert requested() == {"guards", "recompiles"}
    assert enabled("guards") and not enabled("graph_breaks")
    monkeypatch.setenv("TORCHKILN_LOGS", "all")
    assert requested() == set(ARTIFACTS)
    assert {"guards", "recompiles", "graph_breaks", "output_code"} <= set(ARTIFACTS)


def test_a_misspelt_name_fails_the_guard_compile_loudly(monkeypatch):
    x = torch.randn(3)

    def f(x):
        return x + 1

    monkeypatch.setenv("TORCHKILN_LOGS", "gaurds")
    with pytest.raises(UnknownLogName, match="gaurds"):
        compile_guards(
            [TensorMatch.from_tensor(LocalSource("x"), x)],
            signature=inspect.signature(f),
            f_globals={},
        )


def test_guards_artifact_goes_to_stderr_with_its_logger_name(monkeypatch, capsys):
    x = torch.randn(3)

    def f(x):
        return x + 1

    monkeypatch.setenv("TORCHKILN_LOGS", "guards")
    cg = compile_guards(
        [TensorMatch.from_tensor(LocalSource("x"), x)], signature=inspect.signature(f), f_globals={}
    )
    assert cg.check(x) and not cg.check(torch.randn(4))
    err = capsys.readouterr().err
    assert "[torchkiln.guards] generated guard check:" in err
    assert logging.getLogger("torchkiln.guards").level <= logging.INFO
