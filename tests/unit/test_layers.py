"""The package's shape: imports point down the layers, no module imports itself back through
another, and aiokafka is imported in ``consumer/kafka/`` only (docs/architecture.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "consumer"

# Low to high: a module may import its own unit and any unit of a lower layer, nothing above.
LAYERS: list[set[str]] = [
    {"errors", "redaction", "jsonl"},
    {"ops"},  # metrics, logs, progress bars: every layer reports
    {"judge", "telemetry"},
    {"cost", "inputs"},  # inputs: the formats, their decoders
    {"rules"},
    {"settings"},  # the configuration, checked against the rules and the filter it names
    {"kafka"},
    {"pipeline"},
    {"health", "localjudge"},
    {"wiring"},  # the one module that knows every concrete class: the commands build through it
    {"evaluation"},
    {"replay"},  # its summary uses evaluation's statistics
    {"tail"},  # groundedness verdicts: reads VERDICTS_TOPIC through wiring's group-less reader
    {"cli", "worker", "load_sample", "samples", "settings_help"},
]
LAYER = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def modules() -> dict[str, Path]:
    """Every module of ``consumer`` by dotted name (a package by its own name)."""
    found = {}
    for path in CONSUMER.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path) -> Iterator[str]:
    """Every absolute module name the file imports, at the top, in a function or for types."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def unit(module: str) -> str:
    """``consumer.pipeline.delivery.sink`` -> ``pipeline``; ``consumer.cli`` -> ``cli``."""
    return module.split(".")[1]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {target for target in imports(path)
                   if target in known and target not in (name, "consumer")}
            for name, path in known.items()}


def test_every_unit_has_a_layer() -> None:
    units = {unit(name) for name in modules() if name != "consumer"}
    assert units - LAYER.keys() == set(), "a new folder or top-level module: give it a layer"


def test_imports_point_down() -> None:
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in graph().items() if name != "consumer"
        for target in targets
        if LAYER[unit(target)] > LAYER[unit(name)]
        or (LAYER[unit(target)] == LAYER[unit(name)] and unit(target) != unit(name)
            and LAYER[unit(name)] != len(LAYERS) - 1)
    )
    assert upward == []


def test_no_import_cycles() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for target in sorted(edges[name]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name)
    assert cycles == []


def test_only_the_kafka_folder_imports_aiokafka() -> None:
    importers = sorted(
        str(path.relative_to(CONSUMER)) for path in modules().values()
        if any(name == "aiokafka" or name.startswith("aiokafka.") for name in imports(path))
    )
    assert importers, "the scan finds the Kafka adapter"
    assert [name for name in importers if not name.startswith("kafka/")] == []
