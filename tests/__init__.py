"""The test suite, a package so that shared helpers import by name: ``from tests.util import scalar_trace``,
``from tests.testbench.catalogue_util import ...`` (pytest puts the repository root on ``sys.path`` for the
rootdir ``tests/conftest.py``); no test edits ``sys.path``."""
