"""model/errors.py's errors as facts: an option an error names is carried as an
``Option``, which the app words as its flag (``app.usage``), not as text."""

from __future__ import annotations

import ast
import pickle

from schedcli.app.usage import error_text, flag_text
from schedcli.model.errors import InputError, Option, UsageError
from tests.helpers import ROOT


def test_the_app_words_an_option_an_error_names_as_its_flag() -> None:
    e = UsageError("a sweep needs at least one workload and one policy (", Option("policy"), ")")
    assert error_text(e) == "schedcli: a sweep needs at least one workload and one policy (-p)"
    e = UsageError(Option("until", "'x'"), ": one of check, contract")
    assert error_text(e) == "schedcli: --until 'x': one of check, contract"
    located = InputError("t.jsonl", None, ("does not fail ", Option("until", "check"), ": no"))
    assert error_text(located) == "t.jsonl: does not fail --until check: no"


def test_an_error_keeps_the_option_it_names_as_a_fact() -> None:
    e = UsageError(Option("max_time"), ": still running")
    assert e.parts == (Option("max_time"), ": still running")
    assert pickle.loads(pickle.dumps(e)).parts == e.parts  # as a worker sends it back


def _named_options() -> set[str]:
    """Every option name an ``Option(...)`` in engine/ or model/ gives."""
    names = set()
    for layer in ("engine", "model"):
        for path in (ROOT / "schedcli" / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "Option"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names.add(str(node.args[0].value))
    return names


def test_every_option_the_engine_names_is_a_flag_of_the_command_line() -> None:
    from tests.test_layout import _cli_flags

    flags, names = _cli_flags(), _named_options()
    assert len(names) > 10
    assert sorted(n for n in names if flag_text(Option(n)) not in flags) == []
    # Said outside the app (a worker's record), an option reads as the app spells it.
    assert (
        sorted(n for n in names if n != "policy" and str(Option(n)) != flag_text(Option(n))) == []
    )


def test_a_step_mismatch_says_its_step_and_line_at_every_level_typed() -> None:
    """``StepMismatch.mismatch`` is typed (``Mismatched``: its step and line), not Any;
    each level's own mismatch gives both as its views read them."""
    import typing

    from schedcli.engine.levels.request.replay import RequestExpectMismatch, RequestMismatch
    from schedcli.engine.recorded import ExpectMismatch, Mismatch
    from schedcli.model import errors

    hints = typing.get_type_hints(errors.StepMismatch)
    assert hints["mismatch"] is errors.Mismatched
    task = ExpectMismatch(Mismatch(4, 9, [1], [], {}), "t.jsonl")
    request = RequestExpectMismatch(RequestMismatch(5, 11, {}, {}, [], []), "r.jsonl")
    for error, step, line in ((task, 4, 9), (request, 5, 11)):
        said: errors.Mismatched = error.mismatch
        assert (said.step, said.line) == (step, line)
        assert str(error).startswith(f"{'tr'[step - 4]}.jsonl:{line}: step {step} differs")
