"""Imports flow one way: the package's modules form no cycle, counting every import statement
(module-level, inside functions, under ``if TYPE_CHECKING:``), and the package imports nothing
from outside its own dependencies (never the tests or the benchmarks, which live in benches/,
beside the package: they import it, never the other way).

Read from the source with ``ast``, without importing anything, so a lazy import inside a
function counts as much as one at the top: a cycle hidden in a function is still a cycle,
and a tangle of lazy imports is how one grows."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxrl_dist"
# Import names of the dependencies pyproject.toml declares (core and extras) whose import name is
# not their distribution's name.
IMPORT_NAMES = {"pyyaml": "yaml", "orbax-checkpoint": "orbax", "ale-py": "ale_py",
                "playground": "mujoco_playground", "mujoco-mjx": "mujoco"}


def _modules() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, int]]:
    """(imported module or ``module.name``, line) of every import statement in ``name``."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: from the package, up level - 1
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _target(imported: str) -> str | None:
    """The package module an import executes last: the longest prefix that is a module
    (``from jaxrl_dist.agents import conv`` -> ``jaxrl_dist.agents.conv``, ``from
    jaxrl_dist.config import Config`` -> ``jaxrl_dist.config``)."""
    parts = imported.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) or None


def _graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}. Importing ``a.b.c`` also runs the packages ``a``
    and ``a.b``: an edge to each, except to the importer's own packages (already running)."""
    graph: dict[str, dict[str, int]] = {name: {} for name in MODULES}
    for name in MODULES:
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for imported, line in _imports(name):
            if imported.split(".")[0] != "jaxrl_dist":
                continue
            target = _target(imported)
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                module = ".".join(parts[:i])
                if module != name and module not in own:
                    graph[name].setdefault(module, line)
    return graph


def _cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """A cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_module_graph_has_no_cycle():
    graph = _graph()
    cycle = _cycle(graph)
    where = cycle and " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
    assert cycle is None, f"import cycle: {where} -> {cycle[-1]}"


def test_the_cycle_check_sees_function_level_imports():
    """The checker itself: a lazy import back up closes a cycle it reports."""
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {}}
    assert _cycle(graph) is None
    graph["c"]["a"] = 3
    assert _cycle(graph) == ["a", "b", "c", "a"]
    # and function-level imports are read: the drivers' package imports the host driver only
    # inside make
    assert "jaxrl_dist.drivers.host" in {_target(i) for i, _ in _imports("jaxrl_dist.drivers")}


def _dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    names = set()
    for requirement in requirements:
        dist = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        names.add(IMPORT_NAMES.get(dist, dist.replace("-", "_")))
    return names


def test_the_package_imports_only_its_dependencies():
    allowed = set(sys.stdlib_module_names) | _dependencies() | {"jaxrl_dist"}
    bad = []
    for name, path in sorted(MODULES.items()):
        for imported, line in _imports(name):
            top = imported.split(".")[0]
            if top and top not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not bad, "imports from outside the package's dependencies:\n" + "\n".join(bad)


def test_the_package_never_imports_tests_or_benches():
    """Named apart from the allowlist above so the reason is plain: the package must run from
    an installed wheel, which has neither."""
    outside = {"tests", "benches", "conftest", "helpers", "toy_learner"}
    bad = [f"{name}: {imported}" for name in MODULES for imported, _ in _imports(name)
           if imported.split(".")[0] in outside]
    assert not bad, bad


def test_the_benchmarks_live_outside_the_package():
    """The benchmark harness and the peers' runners, scripts and patches are in benches/, beside
    the package (``python -m benches``): none of it is installed with jaxrl_dist, and what the
    harness reads by path is in the same checkout as the harness."""
    inside = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts
              and {"bench", "benches", "peers"} & set(p.relative_to(PACKAGE).parts)]
    assert not inside, f"benchmark files inside the package: {inside}"
    assert (ROOT / "benches" / "__main__.py").is_file()
    assert (ROOT / "benches" / "peers" / "rejax_runner.py").is_file()
