"""``python -m hpcmm bench``: the one-device references, the transport benchmark and the peers
(cuBLASMp through nvmath-python, Heat). Apart from the product path.
"""
