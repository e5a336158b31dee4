"""The registry of systems. Each model config (`conf/model/<model>.yaml`) says under `system:` its name in the report
(the paper's row: `SA`, `EE`, ...; `EX({executor})` for Step Execution, which takes its executor's name; null for a
model that predicts no answers), its place among the report's rows (`order`), its `family` (`multihop`: a system
of the paper's tables; `artifact`: a baseline that measures what a dataset gives away; `stage`: a part of another
system), its jobs in the paper's grid (`paper_experiments`: names of `conf/experiment/` files) and the tiny
backbones its contract test trains it with (`tiny`: overrides) on `contract_dataset` (a `conf/dataset` name;
`musique_ans` unless set: the models spread the four datasets between them); `predicts_support: false` for a model that names no
supporting paragraphs (Q-only: the report shows its support cells as "–", as the paper does, and tests nothing on
them). The report, the paper grid
(`experiment=paper_grid`) and the tests read them here: a model joins all three by its config.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from musique_models import PROJECT_ROOT

MODEL_CONFIGS = PROJECT_ROOT / "conf" / "model"
EXECUTOR_FIELD = "{executor}"
FAMILIES = ("multihop", "artifact", "stage")


class RegistryError(ValueError):
    """A model config's `system:` entry that cannot be read."""


@dataclass(frozen=True)
class System:
    """One model config's entry."""

    model: str
    name: str | None
    order: int
    family: str = "multihop"
    paper_experiments: tuple[str, ...] = ()
    tiny: tuple[str, ...] = ()
    executors: tuple[str, ...] = ()
    predicts_support: bool = True
    contract_dataset: str = "musique_ans"

    @classmethod
    def from_entry(cls, model: str, entry: dict[str, Any]) -> System:
        family = entry.get("family", "multihop")
        if family not in FAMILIES:
            raise RegistryError(
                f"conf/model/{model}.yaml: system.family={family!r}; expected one of: {', '.join(FAMILIES)}"
            )
        return cls(
            model=model,
            name=entry.get("name"),
            order=int(entry.get("order", 99)),
            family=family,
            paper_experiments=tuple(entry.get("paper_experiments") or ()),
            tiny=tuple(entry.get("tiny") or ()),
            executors=tuple(entry.get("executors") or ()),
            predicts_support=bool(entry.get("predicts_support", True)),
            contract_dataset=str(entry.get("contract_dataset", "musique_ans")),
        )


@cache
def registry(folder: Path = MODEL_CONFIGS) -> dict[str, System]:
    """Every model config that has a `system:` entry, by config name (`model=<name>`)."""
    systems = {}
    for path in sorted(folder.glob("*.yaml")):
        entry = (yaml.safe_load(path.read_text()) or {}).get("system")
        if entry is not None:
            systems[path.stem] = System.from_entry(path.stem, entry)
    return systems


def unregistered_models(folder: Path = MODEL_CONFIGS) -> list[str]:
    """Model configs without a `system:` entry (the report could not name their runs)."""
    return [path.stem for path in sorted(folder.glob("*.yaml")) if path.stem not in registry(folder)]


def paper_grid(folder: Path = MODEL_CONFIGS) -> list[str]:
    """The jobs of the paper's grid (`experiment=paper_grid`): every system's `paper_experiments`, in the report's
    order."""
    systems = sorted(registry(folder).values(), key=lambda system: (system.order, system.model))
    return [experiment for system in systems for experiment in system.paper_experiments]


def display_names() -> list[str]:
    """Every row name the report knows, in the report's order (`order`; a Step Execution row per executor, in its
    executors' order)."""
    systems = registry()
    rows: list[tuple[int, int, str]] = []
    for system in systems.values():
        if system.name is None:
            continue
        if EXECUTOR_FIELD in system.name:
            for executor in system.executors:
                if executor in systems and systems[executor].name:
                    name = system.name.replace(EXECUTOR_FIELD, systems[executor].name)
                    rows.append((system.order, systems[executor].order, name))
        else:
            rows.append((system.order, 0, system.name))
    return [name for _, _, name in sorted(rows)]


def system_rank(name: str) -> int:
    """A row name's place in the report's order (unknown names last)."""
    names = display_names()
    return names.index(name) if name in names else len(names)


def run_system(config: dict[str, Any]) -> System | None:
    """A run config's registry entry (the entry saved in the run's config when its model config is gone); None for a
    model without one."""
    model = config.get("model") or {}
    model_name = config.get("model_name") or model.get("name")
    saved = model.get("system")
    return registry().get(model_name) or (System.from_entry(model_name, saved) if saved else None)


def system_name(config: dict[str, Any]) -> str | None:
    """A run config's row in the report (`EE`, `SA`, `EX(EE)`, ...): its registry entry's name; None for a model that
    predicts no answers or has no entry."""
    system = run_system(config)
    if system is None or system.name is None:
        return None
    if EXECUTOR_FIELD not in system.name:
        return system.name
    model = config.get("model") or {}
    executor = registry().get(model.get("executor") or config.get("executor") or "select_answer")
    return system.name.replace(EXECUTOR_FIELD, executor.name) if executor is not None and executor.name else None
