"""plena-sim: a register-accurate, Numba-accelerated, cycle-level simulator of the PLENA accelerator."""
__version__ = "0.1.0"
