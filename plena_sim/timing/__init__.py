"""Timing: the per-opcode latencies, the serial / overlap / rtl cycle models and their statistics.

``latency`` (the legacy per-opcode latency table, timing.md §2), ``scoreboard`` (the timing state, the serial
sum and the overlap scoreboard, the trace record layout), ``rtl`` (the rtl model's data,
``data/rtl_timing_v1.toml``), ``stats`` (busy / stall / profile statistics of a run), ``regions`` (the profile
summed per code region). Import the submodules; this package re-exports nothing.
"""
