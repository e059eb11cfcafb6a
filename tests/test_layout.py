"""The package's layout (docs/development.md): each package imports only from the floors below it
or its own, no module outgrows 400 lines, tasks use other packages' public names only, and
``estimate`` stays a short composition of the step's terms."""

import ast
from pathlib import Path

import pytest

import jctopt

PACKAGE = Path(jctopt.__file__).parent
# Floors, lowest first: a module may import from its own floor's package or a lower floor.
FLOORS = {"model": 0, "config": 1, "job": 2, "search": 3, "runs": 3, "fit": 4, "tasks": 5, "app": 6, "": 6}
MODULES = sorted(PACKAGE.rglob("*.py"))


def package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0] if len(parts) > 1 else ("app" if parts[0] == "app" else "")


def imported_packages(path: Path):
    """(line, jctopt package) of every import of a jctopt module in ``path``."""
    tree = ast.parse(path.read_text())
    here = path.relative_to(PACKAGE).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - (node.level - 1)])
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "jctopt":
                target = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            # "from .. import model" names the package itself.
            heads = [target[0]] if target else [n for n in names]
            for head in heads:
                yield node.lineno, head if head in FLOORS else ("app" if head == "app" else "")


def test_every_floor_is_known():
    assert {package_of(p) for p in MODULES} <= set(FLOORS)
    assert {"model", "config", "job", "search", "runs", "fit", "tasks"} <= {package_of(p) for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_from_a_higher_floor(path):
    mine = package_of(path)
    up = [(line, pkg) for line, pkg in imported_packages(path)
          if pkg != mine and FLOORS[pkg] >= FLOORS[mine] and mine != ""]
    assert not up, f"{path.name} (floor {FLOORS[mine]}) imports from {up}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_400_lines(path):
    assert len(path.read_text().splitlines()) <= 400


def test_tasks_use_public_names_of_other_packages():
    private = []
    for path in (PACKAGE / "tasks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:  # another package
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not private


def test_estimate_is_a_short_composition():
    tree = ast.parse((PACKAGE / "job" / "jct.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "estimate")
    assert fn.end_lineno - fn.lineno + 1 <= 80


def test_step_parts_are_the_breakdown_fields():
    """The breakdown's fields come from the terms' StepParts, in the order they are summed."""
    from jctopt.job import STEP_PARTS, Estimate
    from jctopt.model.step import StepParts

    assert STEP_PARTS == StepParts._fields
    i = Estimate._fields.index(STEP_PARTS[0])
    assert Estimate._fields[i: i + len(STEP_PARTS)] == STEP_PARTS
