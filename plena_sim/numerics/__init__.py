"""Number formats: ``formats`` (bf16, minifloats, the MX block codec: the Numba kernels and the tensor
encode / decode) and ``bf16`` (the host-side bf16 rule). Import the submodules; this package re-exports nothing.
"""
