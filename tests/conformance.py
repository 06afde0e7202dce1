"""The conformance model lives in the package, for plugin authors too (schedcli.testing)."""

from schedcli.testing import Model, Op, play, random_ops

__all__ = ["Model", "Op", "play", "random_ops"]
