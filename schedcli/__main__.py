from .app.entry import run

run()
