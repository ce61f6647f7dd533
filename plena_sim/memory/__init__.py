"""The machine's memories: ``state`` (MachineState, Outcome: registers, SRAMs, HBM, loop stack), ``image``
(HBM images and their manifests, ImageBuilder) and ``sram_io`` (FP / INT SRAM files and dumps). Import the
submodules; this package re-exports nothing.
"""
