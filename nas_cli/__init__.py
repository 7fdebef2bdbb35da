"""The ``nas`` command line: the top of the stack, importing everything below it."""
