"""Imports point down only: isa <- plena_sim <- programs <- testbenches <- plena_sim.cli (the top floor)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVEL = {"isa": 0, "plena_sim": 1, "programs": 2, "testbenches": 3}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    pkg = path.relative_to(ROOT).parts[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:       # relative import stays inside the package
                yield pkg + "." + (node.module or ""), node.lineno
            else:
                yield node.module or "", node.lineno


def test_imports_point_down_and_nothing_imports_the_cli():
    bad = []
    for pkg, level in LEVEL.items():
        for path in sorted((ROOT / pkg).rglob("*.py")):
            is_cli = path == ROOT / "plena_sim" / "cli.py"
            for mod, line in _imports(path):
                top = mod.split(".")[0]
                if mod.startswith("plena_sim.cli") and not is_cli:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports the CLI")
                if top in LEVEL and LEVEL[top] > level and not is_cli:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod} (upward)")
    assert not bad, "\n".join(bad)
