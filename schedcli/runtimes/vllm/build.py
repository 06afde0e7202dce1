"""Whether the vLLM importable in this process can be driven, and loading it once
(``vllm_build.py`` holds the building itself: it also runs under another interpreter)."""

from __future__ import annotations

from typing import Any

from .vllm_build import ON_OFF, SUPPORTED, flag


def available() -> str | None:
    """None when vLLM can be found here; else what to install. (Its files and metadata are
    looked up, not imported: a validate stays fast; whether it is of the supported family
    is checked as it loads, vllm_build.load.)"""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    install = f"needs vLLM {SUPPORTED}: pip install 'schedcli[vllm]', or -p vllm@PYTHON"
    if importlib.util.find_spec("vllm") is None:
        return install
    try:
        version("vllm")
    except PackageNotFoundError:
        return install
    return None


def load() -> Any:
    """vLLM's names, imported once per process (``vllm_build.Vllm``); a ValueError saying what
    to install when it cannot be."""
    from . import vllm_build as core

    missing = available()
    if missing is not None:
        raise ValueError(missing)
    try:
        return core.load()
    except core.Unsupported as e:
        raise ValueError(str(e)) from None


__all__ = ["ON_OFF", "available", "flag", "load"]
