"""Every input format ``schedcli convert`` reads: one module each (see ``_common``).

``NAMES`` is the list: the command line offers it without loading a converter (every
command's start would pay for them); ``converters()`` loads the table when one is used.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._common import Converter

# Each is the module ``<name>.py`` here (imported in ``_modules``), whose ``CONVERTER`` has
# that name; in the order ``auto`` tries them.
NAMES: Final = ("azure", "mooncake", "vidur", "lengths", "burstgpt", "requests")


@functools.cache
def converters() -> dict[str, Converter]:
    """The converter of each format, by name, in ``NAMES`` order."""
    modules = _modules()
    table: dict[str, Converter] = {}
    for name in NAMES:
        converter: Converter = modules[name].CONVERTER
        if converter.name != name:
            raise AssertionError(f"converters/{name}.py declares {converter.name!r}")
        table[name] = converter
    return table


def _modules() -> dict[str, ModuleType]:
    """Each converter's module by its name: imported by statements the import graph sees,
    when a converter is first used."""
    from . import azure, burstgpt, lengths, mooncake, requests, vidur

    found = (azure, mooncake, vidur, lengths, burstgpt, requests)
    return {module.__name__.rpartition(".")[2]: module for module in found}


__all__ = ["NAMES", "converters"]
