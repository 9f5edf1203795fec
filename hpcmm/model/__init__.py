"""The cost model (``cost``) and its machine descriptions (``machines/*.json``): imported only where
``--algo auto`` or ``2.5d`` or the ``model`` subcommand asks.
"""
