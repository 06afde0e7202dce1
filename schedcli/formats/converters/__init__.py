"""Every input format ``schedcli convert`` reads: one record each (see ``_common``)."""

from __future__ import annotations

from . import azure, burstgpt, lengths, mooncake, vidur
from ._common import Converter

CONVERTERS: dict[str, Converter] = {
    c.name: c
    for c in (
        azure.CONVERTER,
        mooncake.CONVERTER,
        vidur.CONVERTER,
        lengths.CONVERTER,
        burstgpt.CONVERTER,
    )
}

__all__ = ["CONVERTERS", "Converter"]
