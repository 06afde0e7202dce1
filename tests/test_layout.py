"""The package's shape (#40): no import cycle between its modules, inside functions
included; no module imported by a string (the layers contract sees import statements
only); no module that has outgrown a reader's screenful of screens; and a layer diagram
(docs/architecture.md) that names every module of each layer and nothing else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import ROOT

PACKAGE = ROOT / "schedcli"
MAX_LINES = 600  # the longest a module may be
LAYERS = ("app", "engine", "catalog", "runtimes", "formats", "policies", "streams", "model")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            relative = ".".join([*base, *([node.module] if node.module else [])])
            target = relative if node.level else node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out.update(n for n in names if n in modules and n != name)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules around it; None if there is none."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_no_module_imports_itself_round_a_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle_inside_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_longer_than_the_cap() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long


def _diagram() -> dict[str, str]:
    """The text the layer diagram gives each layer (the first code block of
    docs/architecture.md; a layer's section starts at its name followed by spaces)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```\n", 2)[1]
    sections: dict[str, str] = {}
    layer = None
    for line in block.splitlines():
        rest = line.lstrip(" │")
        head = rest.split(" ", 1)[0]
        if head in LAYERS and rest.startswith(f"{head}   "):
            layer, rest = head, rest[len(head) :]
        if layer is not None:
            sections[layer] = sections.get(layer, "") + " " + rest
    return sections


def _named(section: str) -> set[str]:
    """The names a section lists: its items outside parentheses, labels ("the commands:")
    left out, "a and b" or "a with b" counted as two."""
    while True:
        stripped = re.sub(r"\([^()]*\)", "", section)
        if stripped == section:
            break
        section = stripped
    section = re.sub(r"(^|;)\s*[a-z ]+:", ";", section)
    items = re.split(r"[,;]| and | with ", section)
    return {item.strip() for item in items if item.strip()}


def _modules_in(folder: Path) -> set[str]:
    """A folder's public modules, and its subpackages as ``name/``."""
    names = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    return names | {f"{d.name}/" for d in folder.iterdir() if (d / "__init__.py").exists()}


def test_the_layer_diagram_names_every_module_and_no_other() -> None:
    sections = _diagram()
    assert set(sections) == set(LAYERS)
    for layer in LAYERS:
        assert _named(sections[layer]) == _modules_in(PACKAGE / layer), layer


def test_the_layer_diagram_names_each_subpackages_modules() -> None:
    sections = _diagram()
    for layer in LAYERS:
        words = set(re.findall(r"[a-z_]+", sections[layer]))
        for package in (PACKAGE / layer).rglob("*/__init__.py"):
            if package.parent == PACKAGE / layer:
                continue
            names = {name.rstrip("/") for name in _modules_in(package.parent)}
            assert names <= words, package.parent


def test_the_diagram_check_sees_a_module_left_out() -> None:
    assert _named("a, b (with c), d and e; the rest: f/ (g, h) with i") == {
        "a",
        "b",
        "d",
        "e",
        "f/",
        "i",
    }


def _independent(name: str) -> set[str]:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [independent] = [c for c in contracts["contracts"] if c["name"] == name]
    assert independent["type"] == "independence"
    return set(independent["modules"])


def test_every_command_module_is_under_the_independence_contract() -> None:
    # A command added under app/commands/ cannot import another one unnoticed.
    commands = {name.rstrip("/") for name in _modules_in(PACKAGE / "app" / "commands")}
    assert _independent("Commands are independent") == {
        f"schedcli.app.commands.{c}" for c in commands
    }


def test_every_command_line_module_is_under_its_independence_contract() -> None:
    # A command's options are its own: its module in app/commandline/ borrows no other's.
    lines = _modules_in(PACKAGE / "app" / "commandline")
    assert _independent("Command lines are independent") == {
        f"schedcli.app.commandline.{c}" for c in lines
    }


def test_each_command_is_its_own_module_and_cli_only_assembles_them() -> None:
    # A command owns its options: its function, named for it, is in app/commandline/NAME.py
    # beside the options only it takes; app/cli.py registers them and declares none.
    from schedcli.app.cli import _command_name, app

    names = [_command_name(i.callback) for i in app.registered_commands if i.callback]
    modules = [i.callback.__module__ for i in app.registered_commands if i.callback]
    assert modules == [f"schedcli.app.commandline.{n}" for n in names]
    assert set(names) == _modules_in(PACKAGE / "app" / "commandline")


def _imports_by_string(path: Path) -> list[int]:
    """The lines of ``path`` that import a module by a string (``import_module``,
    ``__import__``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__"):
            found.append(node.lineno)
    return found


# What may import by a string: the user's code named on the command line
# (-p module:Class; vllm:MODULE:CLASS in the process that runs vLLM), and the compiled
# core's shared library; and the command line's table, which loads only the command run
# (each module it names is under the "Command lines are independent" contract).
USER_CODE = {
    "catalog/registry.py",
    "runtimes/vllm/vllm_build.py",
    "_compiled.py",
    "app/cli.py",
}


def test_no_module_of_schedcli_is_imported_by_a_string() -> None:
    # The layers contract sees import statements only (inside functions too): a module
    # imported by its name in a string would cross the layers unseen.
    found = {
        str(p.relative_to(PACKAGE)): lines
        for p in PACKAGE.rglob("*.py")
        if (lines := _imports_by_string(p)) and str(p.relative_to(PACKAGE)) not in USER_CODE
    }
    assert not found, found


# A test file is named for the code it tests; what it once was (a campaign, a round, an
# issue's rows, a second file of the same) says nothing of where a test belongs.
HISTORY = re.compile(r"_\d+$|round|honest|findings_?\d|fuzz_findings|campaign|issue_?\d|rows?_?\d")


def _named_by_history(path: Path) -> bool:
    return bool(HISTORY.search(path.stem))


def test_no_test_file_is_named_by_its_history() -> None:
    named = [p for p in (ROOT / "tests").rglob("*.py") if _named_by_history(p)]
    assert not named, [str(p.relative_to(ROOT)) for p in named]


def test_the_history_check_sees_the_names_it_forbids() -> None:
    for stem in ("test_fuzz_findings", "test_fuzz_findings_3", "test_honest_verdicts_2",
                 "test_round_two", "test_issue38", "test_check_2"):  # fmt: skip
        assert _named_by_history(Path(f"tests/{stem}.py")), stem
    for stem in ("test_check", "test_trace", "test_vllm_worker", "test_cxx_build", "test_findings"):
        assert not _named_by_history(Path(f"tests/{stem}.py")), stem


# Strings in engine/ and model/ that may name a flag: none (the engine names an option as
# a fact, model.errors.Option, and the app words it).
NAMES_FLAGS: set[str] = set()
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[pP]\b)")


def _cli_flags() -> set[str]:
    import typer.main

    from schedcli.app.cli import app

    flags = {"--executorch", "--stall-steps"}  # any command's, taken by app/entry.py
    stack = [typer.main.get_command(app)]
    while stack:
        command = stack.pop()
        stack += getattr(command, "commands", {}).values()
        for param in command.params:
            flags.update(param.opts, param.secondary_opts)
    return flags


def _flags_named(source: str, flags: set[str]) -> list[tuple[int, str]]:
    """The lines of string literals (a docstring or a bare string aside) naming a flag."""
    tree = ast.parse(source)
    said = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, flag)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in said
        for flag in _FLAG.findall(node.value)
        if flag in flags
    ]


def test_the_engine_and_the_model_name_no_command_line_flag() -> None:
    """They say which option as a fact (``model.errors.Option``); the app words it."""
    flags, found = _cli_flags(), []
    for layer in ("engine", "model"):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            where = path.relative_to(PACKAGE).as_posix()
            if where not in NAMES_FLAGS:
                found += [f"{where}:{n}: {f}" for n, f in _flags_named(path.read_text(), flags)]
    assert not found, found


def test_the_flag_check_sees_a_flag_in_a_message_and_not_in_a_docstring() -> None:
    flags = _cli_flags()
    assert "-p" in flags and "--until" in flags and "--stdin" not in flags
    planted = '"""Under --check."""\nraise UsageError(f"{x}: --until is wrong (-p)")\n'
    assert _flags_named(planted, flags) == [(2, "--until"), (2, "-p")]
    assert _flags_named('git("diff", "--stdin")\n', flags) == []  # git's own


# A trace's level is chosen in one table (engine/levels/table.py) and asked of the level
# it gives; only the levels themselves, the catalog (which finds a policy of a level) and
# the formats (which read a trace of a level) may name one.
LEVEL_HOMES = ("engine/levels/", "catalog/", "formats/")
LEVEL_NAMES = {"task", "request"}
# One level's classes: an isinstance against one of them branches on the level.
LEVEL_CLASSES = {
    "OpenTrace",
    "OpenRequestTrace",
    "Replayer",
    "RequestReplayer",
    "Scheduler",
    "RequestScheduler",
    "Mismatch",
    "RequestMismatch",
    "ExpectMismatch",
    "RequestExpectMismatch",
    "TaskSide",
    "RequestSide",
    "RequestEvent",
}


def _names(node: ast.AST) -> set[str]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.Attribute):
            found.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.add(n.value)
    return found


def _level_checks(source: str) -> list[int]:
    """The lines of ``source`` that check a trace's level: a level's name compared with
    something that speaks of a level, an isinstance against one level's classes, a
    request-trace sniff."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(
                isinstance(v, ast.Constant) and v.value in LEVEL_NAMES
                for side in sides
                for v in [side, *getattr(side, "elts", [])]
            )
            said = _names(node)
            if named and ("mode" in said or any("level" in n.lower() for n in said)):
                found.append(node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            isinstance_of_one = name == "isinstance" and len(node.args) == 2
            if name in ("is_request_trace", "header_level") or (
                isinstance_of_one and _names(node.args[1]) & LEVEL_CLASSES
            ):
                found.append(node.lineno)
    return found


def test_no_module_outside_the_levels_checks_a_traces_level() -> None:
    found = {
        rel: lines
        for p in PACKAGE.rglob("*.py")
        if not (rel := str(p.relative_to(PACKAGE))).startswith(LEVEL_HOMES)
        and (lines := _level_checks(p.read_text()))
    }
    assert not found, found


def test_the_level_check_finder_sees_each_kind_of_check() -> None:
    planted = [
        "if opened.level.name == 'request': pass",
        "if header.level in ('task', 'request'): pass",
        "if 'request' != level: pass",
        "if record['end'].get('mode') == 'request': pass",
        "if isinstance(engine, RequestReplayer): pass",
        "if isinstance(policy, (Scheduler, int)): pass",
        "if isinstance(opened, levels.OpenRequestTrace): pass",
        "if is_request_trace(path): pass",
        "if kinds.is_request_trace(path): pass",
        "level = header_level(path)",
    ]
    for source in planted:
        assert _level_checks(source) == [1], source
    for source in ("if column == 'request': pass", "if isinstance(item, Event): pass"):
        assert _level_checks(source) == [], source
