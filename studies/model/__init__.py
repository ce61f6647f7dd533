"""A model preset's prefill layer and decode step, judged, and what they imply (``plena-sim model``).

:func:`run_model` (a preset of :mod:`programs.model.presets`, or the path of a ``.toml`` file of the same form)
runs the ``decoder_layer`` testbench (one layer over a prompt of ``seq`` tokens) and the ``decoder_decode``
testbench (one layer, one new token after a cache of ``kv`` tokens) through the harness
(:func:`testbenches.harness.run_case`, the code path of ``plena-sim run``), judges both and derives, at the
hardware preset's clock (``clock_mhz``; else 1 GHz, the 1 ns cycles of timing.md):

* ``ttft_s = layers x prefill_layer_cycles / clock_hz`` (the prefill of ``seq`` tokens through every layer);
* ``decode_tokens_per_s = batch / (layers x decode_layer_cycles / clock_hz)``.

It returns the run's JSON document (``plena-sim model --json``). A shape the machine or the generators cannot
take is a :class:`~studies.errors.ModelError` naming the parameter and the limit; a mismatch or a simulator
fault is the verdict ``FAIL`` (each run's ``fault`` says which).

Modules: :mod:`.run` (:class:`~studies.model.run.ModelRun`, :func:`prepare`, :func:`execute`,
:func:`run_model`), :mod:`.figures` (the clock, TTFT and tokens/s arithmetic, the region merge).
"""

from .figures import DEFAULT_CLOCK_HZ, clock_of, layer_figures, merge_regions
from .run import DECODE_TESTBENCH, PREFILL_TESTBENCH, ModelRun, execute, load_model, prepare, run_model

__all__ = [
    "run_model",
    "prepare",
    "execute",
    "ModelRun",
    "load_model",
    "PREFILL_TESTBENCH",
    "DECODE_TESTBENCH",
    "DEFAULT_CLOCK_HZ",
    "clock_of",
    "layer_figures",
    "merge_regions",
]
