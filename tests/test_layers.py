"""Imports point down the layers of docs/design.md, and no module imports itself in a circle.

Every `import` in the package counts, including the ones inside functions and
under `TYPE_CHECKING`: a lazy import still ties the two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "augserve"

# package -> layer (docs/design.md); a package may import lower layers and itself
LAYERS = {
    "core": 1,
    "sched": 2,
    "predict": 2,
    "workload": 2,
    "profiles": 2,
    "data": 2,
    "sim": 3,
    "engine": 3,
    "bench": 4,
    "cli": 4,
    "server": 4,
    "integrations": 4,
}
FACES = 4  # faces may import anything below or beside them
FACADE = {"augserve", "augserve.__main__"}  # the package root re-exports the offline API


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """augserve modules imported by the file (resolving relative imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("augserve"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base.startswith("augserve"):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    return {m: {i for i in imports(p) if i in files and i != m} for m, p in files.items()}


def layer_of(module: str) -> tuple[str, int]:
    parts = module.split(".")
    pkg = parts[1] if len(parts) > 1 else ""
    return pkg, LAYERS.get(pkg, FACES)


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(LAYERS), f"give these packages a layer: {packages - set(LAYERS)}"


def test_imports_point_down_the_layers() -> None:
    bad = []
    for mod, deps in graph().items():
        if mod in FACADE:
            continue
        pkg, layer = layer_of(mod)
        for dep in deps:
            dpkg, dlayer = layer_of(dep)
            if dpkg == pkg or dlayer < layer or (layer == FACES and dlayer <= FACES):
                continue
            bad.append(f"{mod} (layer {layer}) imports {dep} (layer {dlayer})")
    assert not bad, "imports that run up or across the layers:\n" + "\n".join(sorted(bad))


def test_no_import_cycles() -> None:
    g = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state and m not in FACADE:
            visit(m, [])
    # a package's __init__ may re-export its modules: importing it from them is a cycle
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("lower", ["core", "sched"])
def test_core_and_sched_import_no_torch_and_do_no_io(lower: str) -> None:
    banned = ("torch", "fastapi", "uvicorn", "httpx", "requests", "transformers", "socket")
    for path in (PKG / lower).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                assert n.split(".")[0] not in banned, f"{path} imports {n}"
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                raise AssertionError(f"{path}:{node.lineno} opens a file")
