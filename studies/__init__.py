"""Studies: what the simulator is run for, as a library -- one testbench case run and judged as a JSON document,
a model's prefill layer and decode step with the figures they imply, design-space sweeps and their reports.

Floors: ``isa`` <- ``plena_sim`` <- ``programs`` <- ``testbenches`` <- ``studies`` <- ``plena_cli``
(tests/test_layering.py): the command line renders what these functions return; nothing here imports rich or
:mod:`plena_cli`.

Modules:

* :mod:`.errors` -- :class:`~studies.errors.StudyError`, a request the library refuses (the command line: exit 2,
  one line), and the input errors of the lower floors;
* :mod:`.documents` -- the JSON document of one judged testbench run (``plena-sim run --json``, ``result.json``);
* :mod:`.testbench_run` -- one testbench case from a :class:`~studies.testbench_run.CaseRequest`: its parameters
  and machine, built, run through the harness and judged (``plena-sim run``);
* :mod:`.model` -- ``run_model``: a model preset's prefill layer and decode step, judged; TTFT, tokens/s and the
  cycles per region (``plena-sim model``);
* :mod:`.sweep` -- design-space sweeps: the spec, its expressions, one point on a worker, the results database,
  the Dask engine (``run_sweep``) and the report data, plots and exports (``plena-sim sweep``; the optional
  ``sweep`` extra).
"""
