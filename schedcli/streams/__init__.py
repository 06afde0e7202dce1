"""The floor under formats/: bytes in (source: a file, ``.gz``, stdin, a file followed),
bytes out (output: ``-o FILE`` opened at its first byte, written whole), and a stop signal
held while a write is under way (interrupt). They know no format."""
