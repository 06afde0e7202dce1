"""Recorders that live inside other runtimes (each needs that runtime installed)."""
