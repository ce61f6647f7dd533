"""``plena-sim sweep``: design-space sweeps on Dask distributed, results in a SQLite database, reports with
DuckDB exports and matplotlib plots. Modules: :mod:`.spec` (the TOML spec and its points), :mod:`.expr` (its
expressions), :mod:`.point` (one point on a worker: the ``run --json`` code path), :mod:`.store` (the results
database), :mod:`.engine` (the Dask driver), :mod:`.report` (tables, Pareto fronts, plots, exports)."""
