"""Data in and out of a product: generated and stored inputs, the caller's operands, moving blocks
between layouts, gathering C, the results file, its status file and its metadata.
"""
