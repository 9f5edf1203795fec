"""Who holds what: block ranges of A, B and C over a process grid (``layout``) and the public layout of
a caller's blocks (``distribution``). Pure: no MPI, no device.
"""
