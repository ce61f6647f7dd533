"""Package floors without exceptions: isa <- plena_sim <- programs <- testbenches <- studies <- plena_cli.

Rules, over every ``.py`` file of the six packages:

1. an import may name only its own package or a package on a lower floor (``plena_cli`` is the top:
   nothing imports it);
2. there is no import cycle between the modules of one package.

Every import counts -- module level, inside functions (lazy) or anywhere else -- except the ones under
``if TYPE_CHECKING:`` (never executed). ``from X import name`` names the module ``X.name`` if that is a
module of the repository, else ``X``; relative imports are resolved against the importing module.
Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit parent imports are not
edges (every submodule would otherwise be in a cycle with its package).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("isa", "plena_sim", "programs", "testbenches", "studies", "plena_cli")
LEVEL = {pkg: k for k, pkg in enumerate(FLOORS)}


# ----------------------------------------------------------------------------------------- analysis


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def repo_modules(root: Path = ROOT, packages=FLOORS) -> dict[str, Path]:
    """Module name -> file of every module of ``packages`` under ``root``."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 >= len(base):
        raise ValueError(f"{module}: relative import beyond the top-level package")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[str, int]]:
    """``(imported module, line)`` of every import of ``source`` (module ``module``), lazy ones included,
    those under ``if TYPE_CHECKING:`` excluded."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((sub if sub in known else target, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def _known_target(name: str, known: set[str]) -> str | None:
    """The longest prefix of ``name`` that is a repository module (``import a.b.c`` of a function-less
    package path names its deepest existing module)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        cand = ".".join(parts[:k])
        if cand in known:
            return cand
    return None


def import_graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Intra-package edges ``module -> imported modules`` and the floor violations (rule 1)."""
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    bad = []
    for mod, path in modules.items():
        pkg = mod.split(".")[0]
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for name, line in imports_of(path.read_text(encoding="utf-8"), mod, path.name == "__init__.py", known):
            top = name.split(".")[0]
            if top in LEVEL and LEVEL[top] > LEVEL[pkg]:
                bad.append(f"{where}:{line} imports {name} (upward: {pkg} is below {top})")
            target = _known_target(name, known)
            if top == pkg and target is not None:
                graph[mod].add(target)
    return graph, bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return out


# ----------------------------------------------------------------------------------------- the rules


def test_the_floors_are_the_installed_packages():
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(p.rstrip("*") for p in include) == sorted(FLOORS)


def test_imports_point_down_only_lazy_ones_included():
    _graph, bad = import_graph(repo_modules())
    assert not bad, "\n".join(bad)


def test_no_import_cycle_inside_a_package():
    graph, _bad = import_graph(repo_modules())
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cli_is_its_own_top_package():
    assert not (ROOT / "plena_sim" / "cli.py").exists()
    assert not (ROOT / "testbenches" / "bench.py").exists()


# ----------------------------------------------------------------------------------------- the checker itself


def _fake_repo(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return repo_modules(tmp_path, ("isa", "plena_sim", "plena_cli"))


def test_checker_sees_lazy_and_relative_imports_and_skips_type_checking(tmp_path):
    mods = _fake_repo(
        tmp_path,
        {
            "isa/__init__.py": "",
            "isa/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import plena_sim.x\n",
            "plena_sim/__init__.py": "",
            "plena_sim/x.py": "def f():\n    from . import y\n",
            "plena_sim/y.py": "import numpy\nfrom .x import f\n\ndef g():\n    import plena_cli.main\n",
            "plena_cli/__init__.py": "",
            "plena_cli/main.py": "from plena_sim import x\n",
        },
    )
    known = set(mods)
    assert imports_of(mods["plena_sim.x"].read_text(), "plena_sim.x", False, known) == [("plena_sim.y", 2)]
    assert imports_of(mods["isa.a"].read_text(), "isa.a", False, known) == [("typing", 1)]
    graph, bad = import_graph(mods)
    assert len(bad) == 1 and "imports plena_cli.main (upward" in bad[0]  # the lazy one in y.g
    assert graph["plena_sim.x"] == {"plena_sim.y"} and graph["plena_sim.y"] == {"plena_sim.x"}
    assert cycles(graph) == [["plena_sim.x", "plena_sim.y"]]
    assert graph["plena_cli.main"] == set()  # an import of a lower floor is not an intra-package edge
