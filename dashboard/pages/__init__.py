"""The dashboard's pages, each registering its own callbacks on the app: ``register(app,
cache)``. ``studies`` (``/``), ``study`` (``/study/<name>``: summary, front, table, comparison,
downloads) with its ``views`` (the tabs below the front and the linked selection), and
``trial`` (``/study/<name>/trial/<number>``). ``dashboard.app`` routes between them."""
