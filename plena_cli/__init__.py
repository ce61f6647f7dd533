"""The ``plena-sim`` command line: the top floor (it may import every other package; nothing imports it).

Floors: ``isa`` <- ``plena_sim`` <- ``programs`` <- ``testbenches`` <- ``studies`` <- ``plena_cli``
(tests/test_layering.py). The studies (a model run, a sweep, one testbench case as a JSON document) are the
library's (:mod:`studies`); the commands parse their flags, call it and render what it returns.

Modules, one job each:

* :mod:`.main` -- the entry point: the stop handlers, then the command modules behind :mod:`.boundary` (the
  parser, the dispatch and the error boundary that maps every failure to an exit code, :mod:`.errors`);
* :mod:`.errors` -- the exit codes and :class:`~plena_cli.errors.UsageError` (the library's
  :class:`~studies.errors.StudyError` is a user error too: :func:`.boundary.user_error_types`);
* :mod:`.interrupts` -- Ctrl-C, SIGTERM, ``--timeout`` and a closed stdout: the handlers ``main`` installs first,
  the stop exceptions, their one line and exit code;
* :mod:`.options` -- flags and flag values shared by several commands (``--hw``, ``--config``, ``--set``,
  integers, ``ADDR:COUNT=PATH`` specs);
* :mod:`.paths` -- the files a command reads and writes (program input, checked output paths, atomic
  and streamed writes);
* :mod:`.render` -- shared rich/JSON rendering (consoles, run summary, trace tables, fault headline);
* commands: :mod:`.isa_commands` (asm, disasm, isa), :mod:`.config_commands` (hw, config),
  :mod:`.exec_command` (exec), :mod:`.demo_command` (demo), :mod:`.testbench_commands` (list, run,
  mutants; with :mod:`.testbench_args` -- a testbench request (:mod:`studies.testbench_run`) from the command
  line -- :mod:`.run_report` -- the panel of one run -- and :mod:`.replay` -- the replay set of ``run --save``),
  :mod:`.model_command` (model; with :mod:`.model_report`), :mod:`.sweep_command` (sweep; with
  :mod:`.sweep_report`), :mod:`.trace_command` (trace) and :mod:`.profile_command` (profile), both running
  what :mod:`.run_source` names (a program with :mod:`.machine_inputs`' images, or a testbench's program),
  :mod:`.diff_command` (diff), :mod:`.bench_command` (bench);
* :mod:`.bench` -- the performance benchmark suite (``plena-sim bench``, ``python -m plena_cli.bench``).

The library is imported inside the command functions, so ``plena-sim --help`` and the ISA commands
start without loading Numba.
"""
