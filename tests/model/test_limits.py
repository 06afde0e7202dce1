"""model/limits.py: every bound a value or an option must keep, and its message."""

from __future__ import annotations

from pathlib import Path

from schedcli.app.cli import app
from schedcli.model.limits import OPTIONS
from tests.helpers import located, run_cli


def test_meta_nested_300_deep_is_refused_everywhere(tmp_path: Path) -> None:
    deep = "[" * 300 + "]" * 300
    workload = tmp_path / "w.jsonl"
    workload.write_text(
        '{"sid":0,"arrival":0,"prompt_tokens":5,"output_tokens":1,"meta":' + deep + "}\n"
    )
    assert "meta is nested deeper than 200 levels" in located(
        run_cli("simulate", str(workload)), workload
    )
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(
        '{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":' + deep + "}\n"
    )
    r = run_cli("convert", "auto", str(mooncake), "-o", str(tmp_path / "out.jsonl"))
    assert "hash_ids is nested deeper than 200 levels" in located(r, mooncake)
    dump = tmp_path / "d.jsonl"
    entry = '{"tid":1,"sid":1,"kind":"decode","size":1,"meta":' + deep + "}"
    dump.write_text('{"step":0,"batch":[' + entry + '],"tokens":1,"queued":0}\n')
    assert "nested deeper than 200 levels" in located(
        run_cli("diff", str(dump), str(dump), "-f", "json"), dump
    )


def test_every_numeric_option_of_every_command_has_a_bound() -> None:
    import inspect
    import typing

    missing, numeric = [], 0
    for info in app.registered_commands:
        fn = inspect.unwrap(info.callback)  # type: ignore[arg-type]
        for name, hint in typing.get_type_hints(fn).items():
            kinds = set(typing.get_args(hint)) | {hint}
            if kinds & {int, float} and bool not in kinds:
                numeric += 1
                if name not in OPTIONS:
                    missing.append(f"{fn.__name__} {name}")
    assert numeric > 15 and not missing, missing


def test_a_number_given_as_text_is_ascii_digits_sign_point_and_exponent_only() -> None:
    from schedcli.model.limits import number_text

    assert number_text(" 12 ", True) == 12 and number_text("-3", True) == -3
    assert number_text("1e3", True) == 1000 and number_text("1.5e3", True) == 1500
    assert number_text("2.5", False) == 2.5 and number_text(".5", False) == 0.5
    # What Python's int() and float() take and no grammar of ours does.
    for text in ("1_000", "٣", "0x10", "inf", "nan", "1.0e", "", "+", "1 000", "\uff11"):
        assert number_text(text, False) is None, text
        assert number_text(text, True) is None, text
    assert number_text("1.0", True) is None and number_text("1.5", True) is None
    assert number_text("1e309", False) == float("inf")  # which every bound then refuses


def test_a_policy_parameter_in_another_spelling_than_the_grammar_is_refused() -> None:
    import pytest

    from schedcli import build_policy
    from schedcli.catalog.registry import settled_params
    from schedcli.model.errors import UsageError

    for text in ("1_000", "٣٢", "0x20", " 1e3x"):
        with pytest.raises(UsageError, match=f"max_batch_tokens must be an integer, not {text!r}"):
            build_policy("decode-first", {"max_batch_tokens": text})
    for text in ("1e309", "inf", "-Infinity", "nan"):
        with pytest.raises(
            UsageError, match=f"prefill_weight must be a finite number, not {text!r}"
        ):
            build_policy("fair", {"prefill_weight": text})
    settled = settled_params("decode-first", {"max_batch_tokens": " 1e3 "})
    assert settled["max_batch_tokens"] == 1000


def test_a_numeric_setting_in_the_environment_follows_the_same_grammar() -> None:
    import pytest

    from schedcli.model.limits import BoundError

    with pytest.raises(BoundError, match="not '1_0'"):
        OPTIONS["stall_steps"].parse("stall_steps", "1_0")
    with pytest.raises(BoundError, match="not '٣'"):
        OPTIONS["stall_steps"].parse("stall_steps", "٣")
    assert OPTIONS["stall_steps"].parse("stall_steps", "30") == 30
