"""Where every choice of a product is made: the facts the ranks gather, the options, and the functions
that turn them into one frozen, agreed :class:`~hpcmm.planning.plan.Plan` (``assemble`` is the one
path from options to a built product).
"""
