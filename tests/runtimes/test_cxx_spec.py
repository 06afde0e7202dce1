"""What a ``cxx:`` spec may say, and who may say it (#55): a strict grammar, checked before
any compiler runs, and a trace header that names code but never supplies it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedcli.model.errors import UsageError
from schedcli.runtimes.executorch.spec import MAX_SPEC, parse_line
from tests.conftest import Cli
from tests.helpers import ROOT

FIFO = ROOT / "tests" / "cpp" / "schedulers" / "fifo_scheduler.h"
CALL = "schedcli_test::FifoScheduler::create(max_batch_tokens=512, max_num_seqs=8, 256)"
OPS = [
    {"op": "submit", "tid": 1, "sid": 1, "kind": "prefill", "size": 4},
    {"op": "get_work", "expect": [1]},
]


@pytest.fixture
def compiler_spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$CXX is a program that notes each time it runs: a test asserts it never did."""
    mark = tmp_path / "compiler-ran"
    spy = tmp_path / "spy-c++"
    spy.write_text(f"#!/bin/sh\necho ran >> {mark}\nexit 1\n")
    spy.chmod(spy.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(spy))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("SCHEDCLI_CXX_CACHE", str(tmp_path / "cache"))
    return mark


def _trace(path: Path, policy: str | None, ops: list[dict[str, object]] = OPS) -> Path:
    header: dict[str, object] = {"schedcli": 1}
    if policy is not None:
        header["policy"] = policy
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [header, *ops]))
    return path


INJECTED = (
    "cxx:<executorch/extension/llm/batching/decode_first_scheduler.h>\n"
    "static struct P { P() { __builtin_trap(); } } p;\n"
    "#define X=executorch::extension::llm::batching::DecodeFirstScheduler::create(1, 2, 3)"
)


@pytest.mark.parametrize(
    "command",
    [
        ["replay", "--check"],
        ["validate"],
        ["explain", "--step", "0"],
        ["stats"],
        ["shrink", "--until", "check"],
        ["diff", "--b", "fcfs"],
    ],
    ids=lambda c: c[0],
)
@pytest.mark.parametrize(
    "policy",
    [INJECTED, f"cxx:{FIFO}={CALL}"],
    ids=["code-after-the-header", "a-plain-inline-spec"],
)
def test_a_trace_header_may_not_supply_a_cpp_spec_and_no_compiler_runs(
    cli: Cli, tmp_path: Path, compiler_spy: Path, command: list[str], policy: str
) -> None:
    trace = _trace(tmp_path / "t.jsonl", policy)
    args = [command[0], trace, *command[1:]]
    if command[0] == "shrink":
        args += ["-o", tmp_path / "small.jsonl"]
    done = cli(*args)
    assert done.code == 2, done.stderr
    assert f"{trace}:1: the header names policy" in done.stderr
    assert "an inline C++ spec" in done.stderr
    assert "give it with -p on the command line" in done.stderr
    assert not compiler_spy.exists()


def test_a_check_suite_whose_trace_supplies_a_cpp_spec_fails_it_and_builds_nothing(
    cli: Cli, tmp_path: Path, compiler_spy: Path
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    _trace(suite / "t.jsonl", INJECTED)
    done = cli("check", suite, "--jobs", "1")
    assert done.code == 2
    assert "an inline C++ spec" in done.stdout.decode() + done.stderr
    assert not compiler_spy.exists()


def test_a_trace_header_may_not_name_an_import_string_and_nothing_is_imported(
    cli: Cli, tmp_path: Path
) -> None:
    mark = tmp_path / "imported"
    (tmp_path / "beside_the_trace.py").write_text(
        f"open({str(mark)!r}, 'w').write('ran')\nclass Policy: pass\n"
    )
    trace = _trace(tmp_path / "t.jsonl", "beside_the_trace:Policy")
    for args in (["replay"], ["validate"], ["stats"]):
        done = cli(args[0], trace, *args[1:], cwd=tmp_path)
        assert done.code == 2, done.stderr
        assert "an import string (module:Class)" in done.stderr
    assert not mark.exists()


def test_a_configured_cpp_name_in_a_trace_header_is_named_not_supplied(
    cli: Cli, tmp_path: Path, compiler_spy: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.schedcli.cxx.policies]\nfifo = "{FIFO}={CALL}"\n'
    )
    trace = _trace(tmp_path / "t.jsonl", "cxx:fifo")
    done = cli("validate", trace, cwd=tmp_path)
    assert "the header names policy" not in done.stderr  # named, so taken
    assert compiler_spy.exists()  # and built, as replay builds it (the spy fails the build)
    assert done.code == 2 and "policy 'cxx:fifo': the C++ compiler" in done.stderr


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (f"{FIFO}=a::create(1\n)", "one line of printable characters; it holds '\\n'"),
        (f"{FIFO}\0=a::create(1)", "it holds '\\x00'"),
        (f"{FIFO}=a::create({'9' * 3000})", "is past 64 bits"),
        (f"{FIFO}=a::create(x=18446744073709551616)", "is past 64 bits"),
        (f"{FIFO}=a::b(1); system(\"ls\")", "after the factory call"),
        (f"{FIFO}=a::b(x=1, y=z)", "an integer expected"),
        (f"{FIFO}=a-b(1)", "'(' expected"),
        (f"{FIFO}=a::b<c(1)>(1)", "expected"),
        ('"x.h"=a::b(1)', "one path or one <name>"),
        ("<a\"b.h>=a::b(1)", "is not one <header> name"),
        ("<a//b.h>=a::b(1)", "is not one <header> name"),
        ("~schedcli_no_such_user/x.h=a::b(1)", "no such user's home folder"),
        (f"{FIFO}={' ' * 100_000}a::b(1)", f"at most {MAX_SPEC} characters"),
        (f"{FIFO}=" + "x" * 1_000_000, f"at most {MAX_SPEC} characters"),
    ],
    ids=[
        "newline", "nul", "3000-digits", "past-64-bits", "code-after-the-call", "a-name-value",
        "not-a-name", "an-expression-as-template-argument", "quoted-header", "quote-in-brackets",
        "comment-in-brackets", "unknown-user", "a-run-of-spaces", "a-megabyte",
    ],
)  # fmt: skip
def test_a_spec_outside_the_grammar_is_bad_usage_before_any_compiler_runs(
    cli: Cli, tmp_path: Path, compiler_spy: Path, spec: str, said: str
) -> None:
    trace = _trace(tmp_path / "t.jsonl", None)
    done = cli("replay", trace, "-p", f"cxx:{spec}")
    assert done.code == 2, done.stderr
    assert said in done.stderr
    assert len(done.stderr) < 2000  # the spec is shortened in the message
    assert not compiler_spy.exists()


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("include", '["inc\\u0000lude"]', "holds a control character"),
        ("executorch", '"et\\u0000"', "holds a control character"),
        ("include", '["~schedcli_no_such_user/inc"]', "no such user's home folder"),
        ("executorch", '"~schedcli_no_such_user/et"', "no such user's home folder"),
        ("policies", '{fifo = "' + str(FIFO) + '\\u0000=a::b(1)"}', "it holds '\\x00'"),
    ],
)
def test_a_configured_value_with_a_nul_or_an_unknown_user_is_bad_usage_naming_it(
    cli: Cli, tmp_path: Path, compiler_spy: Path, key: str, value: str, said: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.schedcli.cxx]\n{key} = {value}\n")
    trace = _trace(tmp_path / "t.jsonl", None)
    done = cli("replay", trace, "-p", "cxx:fifo", cwd=tmp_path)
    assert done.code == 2, done.stderr
    assert said in done.stderr
    assert "internal error" not in done.stderr
    assert not compiler_spy.exists()


_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)


@st.composite
def _qualified(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        part = draw(_NAME)
        if depth < 2 and draw(st.booleans()):
            targs = draw(st.lists(_qualified(depth + 1) | st.integers(0, 99).map(str), min_size=1,
                                  max_size=2))  # fmt: skip
            part += "<" + ", ".join(targs) + ">"
        parts.append(part)
    return "::".join(parts)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    callee=_qualified(),
    args=st.lists(st.tuples(st.none() | _NAME, st.integers(0, 2**63 - 1)), max_size=4),
    spaces=st.sampled_from(["", " ", "  "]),
)
def test_every_spec_in_the_grammar_parses_to_what_it_says(
    callee: str, args: list[tuple[str | None, int]], spaces: str
) -> None:
    names = [n for n, _ in args if n is not None]
    shown = [f"{n}{spaces}={spaces}{v}" if n else str(v) for n, v in args]
    line = f"{FIFO}={spaces}{callee}{spaces}({spaces}{(',' + spaces).join(shown)}{spaces})"
    if len(set(names)) != len(names):
        with pytest.raises(UsageError, match="named twice"):
            parse_line("cxx:x", line, ROOT, "--policy")
        return
    header, parsed, parsed_args = parse_line("cxx:x", line, ROOT, "--policy")
    assert header == str(FIFO)
    assert parsed == callee
    assert list(parsed_args) == args


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=200))
def test_any_text_is_a_spec_in_the_grammar_or_bad_usage_never_code(text: str) -> None:
    """What a spec gives the generated C++ holds only the grammar's tokens: no text the
    grammar did not produce reaches it, whatever the spec says."""
    try:
        header, callee, args = parse_line("cxx:x", f"{FIFO}={text}", ROOT, "--policy")
    except UsageError:
        return
    assert header == str(FIFO)
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:<>, ")
    assert set(callee) <= allowed
    assert all((n is None or n.isidentifier()) and 0 <= v < 2**64 for n, v in args)
