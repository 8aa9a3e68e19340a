"""The ``ydb-topic-async`` command line (its help is ``parser``'s docstring).

- ``parser``: the options of every command (``serve``'s are the local server's own, from
  ``ydb_topic_async.testing``);
- ``connection``: the driver the options and the environment describe;
- ``commands``: what each command does;
- ``output``: what the commands print;
- ``main``: running one command, and its exit code.

Importing the package changes nothing in the process (no environment variable, no logging
setup): only running ``main`` does what a command does.
"""

from .main import main

__all__ = ["main"]
