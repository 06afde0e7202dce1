"""``schedcli debug``'s app (Textual, the ``debug`` extra): imported by that command only."""
