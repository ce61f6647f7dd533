"""HBM: the sparse storage, its timing model and that model's presets.

``storage`` (the sparse, page-granular HBM), ``layout`` (slot constants and DMA geometry, no numba),
``timing`` (the bank / channel model and the DMA scheduler), ``presets`` (the HBM2 / HBM3 timing tables,
``data/*.toml``). Import the submodules; this package re-exports nothing.
"""
