"""Traces and post-mortems: what a run leaves behind for a person to read.

``ring`` (the trace ring: records, watch filters, tables, Perfetto export), ``series`` (the plot series of a
trace), ``file`` (a trace saved as .npz and loaded back), ``postmortem`` (the state arrays of a faulting run).
Import the submodules; this package re-exports nothing.
"""
