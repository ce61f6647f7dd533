"""Design-space sweeps on Dask distributed, results in a SQLite database, reports with DuckDB exports and
matplotlib plots (``plena-sim sweep``; the optional ``sweep`` extra provides Dask, DuckDB and matplotlib).

Modules: :mod:`.spec` (the TOML spec and its points: ``load_spec``, ``parse_spec``), :mod:`.expr` (its
expressions), :mod:`.point` (one point on a worker: the judged run of ``plena-sim run --json``,
:func:`studies.testbench_run.run_json`), :mod:`.store` (the results database), :mod:`.engine` (the Dask driver:
``run_sweep``), :mod:`.report` (the report's data -- ``summarize``, Pareto fronts, ``plot_data`` -- the plots and
the CSV / Parquet exports; the command line renders the summary as tables)."""
