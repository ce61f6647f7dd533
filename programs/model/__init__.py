"""Compositions of the kernel generators into whole model layers (:mod:`.decoder`), and their VRAM layout
planner (:mod:`.layout`)."""
