"""Formats: reading and writing traces, dumps, workloads and public request traces.

Imports only the model.
"""
