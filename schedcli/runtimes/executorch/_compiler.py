"""What build.py asks of the C++ compiler and reads back from it, exactly (#55).

The files it read come from its own make rule (``-MD -MF FILE -MT schedcli``), with
make's escapes undone as g++ and clang++ write them (``rule_names``); clang writes a
backslash in a name as ``/``, so a name is checked on disk for which spelling it was
(``readings``). Flags that would make the compiler exit 0 without the library schedcli
asked for (or with a dependency list other than its own) are refused before it runs
(``refused``), and what it made is checked after (``made``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

# The dependency rule's target: schedcli names it, so the rule starts with these bytes.
TARGET = b"schedcli"

MODE = "a flag that changes what the compiler makes cannot be used"


def rule_names(rule: bytes) -> list[str]:
    """The files a make rule of TARGET names, as g++ and clang++ write one, make's escapes
    undone exactly: ``$$`` is ``$``; 2N+1 backslashes and a space or tab are N backslashes
    and that character, 2N and a space are N backslashes ending the name; the backslash
    before ``#`` was added; a space, or a backslash and newline between names, separates.
    Every other byte (a tab clang left bare, ``:``, ``%``, a newline but the last) is the
    name's own: the rule is the file's only one, so only its last newline ends it."""
    body = rule[len(TARGET) + 1 :]
    body = body[:-1] if body.endswith(b"\n") else body
    names: list[bytes] = []
    name, inside, i = bytearray(), False, 0
    while i < len(body):
        c = body[i : i + 1]
        if c == b" ":
            if inside:
                names.append(bytes(name))
                name.clear()
            inside = False
            i += 1
            continue
        if c == b"\\":
            j = i
            while body[j : j + 1] == b"\\":
                j += 1
            run, after = j - i, body[j : j + 1]
            if after == b"\n" and run == 1 and not inside:  # the line goes on
                i = j + 1
                continue
            if after in (b" ", b"\t"):
                name += b"\\" * (run // 2) + (after if run % 2 else b"")
                i = j + run % 2
            elif after == b"#":
                name += b"\\" * (run - 1) + b"#"
                i = j + 1
            else:
                name += body[i:j]
                i = j
        elif body[i : i + 2] == b"$$":
            name += b"$"
            i += 2
        else:
            name += c
            i += 1
        inside = True
    if inside:
        names.append(bytes(name))
    return [os.fsdecode(n) for n in names]


def readings(name: str, exists: Callable[[str], bool]) -> list[str]:
    """The paths that exist among ``name`` read with any ``/`` as a backslash (clang
    writes ``a\\b/x.h`` as ``a/b/x.h``): the file the compiler read is one of them. More
    than one only when both spellings exist (each then counts); none when none does."""
    parts = name.split("/")
    found: list[str] = []

    def walk(head: str, i: int) -> None:
        for j in range(i, len(parts)):
            part = "\\".join(parts[i : j + 1])
            path = part if i == 0 else f"{head}/{part}"
            if j + 1 == len(parts):
                if exists(path):
                    found.append(path)
            elif path == "" or exists(path):
                walk(path, j + 1)
            if path == "":
                return  # an absolute name starts at the root

    walk("", 0)
    return found


# Flags after which the compiler exits 0 without the library schedcli asked for (or not
# where it asked, or with another dependency list than its own), with what each does
# instead; one ending in "*" stands for every flag it starts.
REFUSED = {
    "-E": "only preprocesses",
    "--preprocess": "only preprocesses",
    "-S": "stops at assembly",
    "--assemble": "stops at assembly",
    "-c": "stops at an object file",
    "--compile": "stops at an object file",
    "-fsyntax-only": "only checks the syntax",
    "--analyze": "only analyzes",
    "-emit-*": "makes another kind of output",
    "-###": "only prints the commands",
    "--version": "only prints its version",
    "-dumpversion": "only prints its version",
    "-dumpfullversion": "only prints its version",
    "-dumpmachine": "only prints its target",
    "-dumpspecs": "only prints its specs",
    "-print-*": "only prints",
    "--print-*": "only prints",
    "-ccc-print-*": "only prints",
    "--help*": "only prints help",
    "--target-help": "only prints help",
    "-o*": "names the output, which schedcli names",
    "--output*": "names the output, which schedcli names",
    "-M*": "writes or changes the dependency list, which schedcli asks for itself (-MD)",
}
# Flags whose next argument is a value (a folder, a macro, a flag for another tool).
VALUED = frozenset(
    (
        *("-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote", "-idirafter"),
        *("-iprefix", "-iwithprefix", "-iwithprefixbefore", "-isysroot", "-imultilib"),
        *("-L", "-l", "-u", "-z", "-T", "-target", "--target", "-arch", "-x", "--param"),
        *("-Xlinker", "-Xclang", "-Xassembler", "-Xpreprocessor", "-aux-info"),
        *("-dumpdir", "-dumpbase", "-dumpbase-ext"),
    )
)


def _why(flag: str) -> str | None:
    if flag.startswith("-obj"):  # clang's -objcmt-*: not -o
        return None
    for pattern, why in REFUSED.items():
        if flag == pattern or (pattern[-1] == "*" and flag.startswith(pattern[:-1])):
            return why
    return None


def refused(args: list[str]) -> list[str]:
    """A message for each flag of ``args`` that changes the compiler's mode. A flag for
    the preprocessor (``-Wp,F``, ``-Xpreprocessor F``) counts as F; ``-x`` with a header
    language makes a precompiled header."""
    said: list[str] = []
    given = iter(args)
    for arg in given:
        value = next(given, "") if arg in VALUED else None
        flags = [arg] if value is None else []
        if arg == "-Xpreprocessor":
            flags.append(value or "")
        elif arg.startswith("-Wp,"):
            flags += arg.split(",")[1:]
        elif arg == "-x" and (value or "").endswith("-header"):
            said.append(f"-x {value}: makes a precompiled header")
        said += [f"{flag}: {why}" for flag in flags if (why := _why(flag)) is not None]
    where = "([tool.schedcli.cxx] flags, $CXXFLAGS or $CXX)"
    return [f"the C++ compiler flag {s} {where}; {MODE}" for s in said]


def made(library: Path, rule: Path) -> str | None:
    """None when the compiler made what was asked: ``library`` a shared object (ELF of
    type ET_DYN) and ``rule`` the dependency rule of TARGET; else what it made instead."""
    try:
        with open(library, "rb") as f:
            head = f.read(18)
    except OSError:
        return "no library"
    kind = head[16:18] if head[5:6] == b"\x01" else head[17:15:-1]  # little-endian, or big
    if len(head) < 18 or head[:4] != b"\x7fELF" or kind != b"\x03\x00":  # 3: ET_DYN
        return "a file that is not a shared library"
    try:
        with open(rule, "rb") as f:
            if f.read(len(TARGET) + 1) == TARGET + b":":
                return None
    except OSError:
        pass
    return "no list of the files it read"
