"""JUnit XML, the test report every CI system renders: one testsuite, one testcase each.

No times and no timestamps: the same suite gives the same bytes on every run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

FAILURE, ERROR, SKIPPED = "failure", "error", "skipped"


@dataclass
class Case:
    """One testcase; ``outcome`` is None for a pass, else FAILURE, ERROR or SKIPPED, told
    in one line (``message``) and whole (``text``)."""

    classname: str
    name: str
    outcome: str | None = None
    message: str = ""
    text: str = ""


def write_junit(out: IO[bytes], suite_name: str, cases: Sequence[Case]) -> None:
    outcomes = [c.outcome for c in cases]
    counts = {kind: outcomes.count(kind) for kind in (FAILURE, ERROR, SKIPPED)}
    attrs = {
        "name": suite_name,
        "tests": str(len(cases)),
        "failures": str(counts[FAILURE]),
        "errors": str(counts[ERROR]),
        "skipped": str(counts[SKIPPED]),
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    for case in cases:
        names = {"classname": _xml_text(case.classname), "name": _xml_text(case.name)}
        element = ET.SubElement(suite, "testcase", names)
        if case.outcome is not None:
            outcome = ET.SubElement(element, case.outcome, {"message": _xml_text(case.message)})
            if case.outcome != SKIPPED:
                outcome.set("type", case.outcome)
            outcome.text = _xml_text(case.text) or None
    ET.indent(root)
    out.write(ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n")


def _xml_text(text: str) -> str:
    """Text XML 1.0 can hold: other control characters, lone surrogates (a file name that
    is not UTF-8) and U+FFFE/U+FFFF become U+FFFD."""
    return "".join(c if c in "\t\n\r" or _xml_char(ord(c)) else "\ufffd" for c in text)


def _xml_char(code: int) -> bool:
    return 0x20 <= code < 0xD800 or 0xE000 <= code <= 0xFFFD or code >= 0x10000
