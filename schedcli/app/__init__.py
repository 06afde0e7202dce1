"""The app: the command line and what it shows (tables, reports, timelines, diffs).

The top layer: nothing in schedcli imports it.
"""
