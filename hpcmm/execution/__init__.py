"""What carries a plan out and decides nothing: the SUMMA, 2.5D and dynamic engines, the device backend
and its GEMM library, the communicators and the transports that move panels.
"""
