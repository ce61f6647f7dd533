"""Limits of a run: ``budget`` (the work budget), ``stop`` (stop requests: the flag a signal or timer sets) and
``polling`` (the Numba intrinsic the run loop polls that flag with). Import the submodules; this package
re-exports nothing.
"""
