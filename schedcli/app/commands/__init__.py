"""The commands, one module each (``check`` a package: its suite and its report): each is
its options' request plus one call into the engine, written once over both trace levels.
No command imports another (import-linter's "Commands are independent")."""
