"""The model: what a task is, what a scheduler promises, and what can go wrong.

The bottom layer: it imports nothing else from schedcli.
"""
