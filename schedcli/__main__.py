from .app.cli import run

run()
