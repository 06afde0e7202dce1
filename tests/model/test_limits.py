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
