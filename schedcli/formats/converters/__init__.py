"""Every input format ``schedcli convert`` reads: one module each (see ``_common``).

``NAMES`` is the list: the command line offers it without loading a converter (every
command's start would pay for them); ``converters()`` loads the table when one is used.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._common import Converter

# Each is the module ``<name>.py`` here, whose ``CONVERTER`` has that name; in the order
# ``auto`` tries them.
NAMES: Final = ("azure", "mooncake", "vidur", "lengths", "burstgpt", "requests")


@functools.cache
def converters() -> dict[str, Converter]:
    """The converter of each format, by name, in ``NAMES`` order."""
    table: dict[str, Converter] = {}
    for name in NAMES:
        converter: Converter = importlib.import_module(f"{__name__}.{name}").CONVERTER
        if converter.name != name:
            raise AssertionError(f"converters/{name}.py declares {converter.name!r}")
        table[name] = converter
    return table


__all__ = ["NAMES", "converters"]
