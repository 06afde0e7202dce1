"""The commands of the command line, a module each, named for its command: the command's
function (its name is the command's, its docstring the help), the options and arguments
only it takes, declared beside it (the ones several commands share are in ``options.py``),
and a body that is one call into its module in ``commands/``. ``cli.py`` registers them.

No module here postpones its annotations: typer reads the invoked command's signature at
each start, and a postponed annotation is a string it compiles and evaluates then (for
--help, 25M of its 338M instructions).
"""
