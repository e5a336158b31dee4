"""A trained run in Python: `load_run(RUN_DIR)` gives a predictor that answers questions over any paragraphs.

    from musique_models.runs.api import load_run

    model = load_run("logs/train/runs/2026-12-03_10-00-00")          # any registered system; device="cuda"
    answer = model.predict("Who founded the city where X was born?", [{"title": "X", "text": "..."}, "a paragraph"])
    answer.answer, answer.confidence, answer.support_titles, answer.answerable
    answers = model.predict_batch([(question, paragraphs), ...])
    answers = model.predict_records(records)                          # MuSiQue, HotpotQA or 2Wiki records as in their files

Every call builds one table of schema rows and hands it to the run's predictor (`Recipe.load`), the same code path
as `evaluate.py run=`: the same records give the same predictions. What a system writes beside its predictions (the
ranking, Beam SA's chain, Step Execution's steps, a generative reader's raw generation) comes back on each `Answer`.
Bad input is one `ApiInputError` (a `MusiqueModelsError`) that says what is wrong, never a traceback from inside.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

import musique_models
from musique_models.data.formats import detect_format, get_format
from musique_models.data.schema import Example, Paragraph
from musique_models.errors import MusiqueModelsError
from musique_models.run_files import (
    CONFIG_FILE,
    EXPORT_FILE,
    PROVENANCE_FILE,
    RANKING_FILE,
    STAGE_FILE,
    STEPS_FILE,
    check_run_folder,
    declared_side_files,
)
from musique_models.runs.exported import (
    MODULE_FILE,
    ExportFormatError,
    check_config,
    check_files,
    read_export,
    read_manifest,
)

log = logging.getLogger(__name__)

# The dataset name user questions carry in the schema (no dataset's files hold them).
USER_DATASET = "user"
DEVICES = ("cpu", "cuda")


class ApiInputError(MusiqueModelsError):
    """Input the Python API cannot answer: a question that is not a string, no paragraphs, a record of no known
    format, a run folder that is not a finished run of this version."""


@dataclass
class Answer:
    """One question's prediction: the answer, its confidence, whether the question is answerable, the supporting
    paragraphs (indices into the paragraphs given, and their titles) and what the system writes beside its
    predictions: `ranking` (the first stage's, best first), `chain` (Beam SA), `steps` (Step Execution's executed
    sub-questions), `generation` (a generative reader's raw text); `side` holds every declared side file's record."""

    id: str
    answer: str
    confidence: float
    answerable: bool
    support_idxs: list[int]
    support_titles: list[str]
    ranking: list[int] | None = None
    chain: list[int] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    generation: str | None = None
    side: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class RunPredictor:
    """A finished run's predictor, its models placed once (`load_run`)."""

    def __init__(self, run_dir: Path, cfg: Any, predictor: Any, reads: Any = None) -> None:
        self.run_dir = run_dir
        self.cfg = cfg
        self.predictor = predictor
        self.reads = reads  # an export from elsewhere: what its backbones may read, while it answers too

    def predict(self, question: str, paragraphs: Sequence[dict[str, Any] | str], id: str | None = None) -> Answer:
        """The answer to `question` over `paragraphs` (`{"title", "text"}` dicts or plain strings, in order)."""
        return self.predict_batch([(question, paragraphs, id)])[0]

    def predict_batch(self, items: Iterable[Sequence[Any] | dict[str, Any]]) -> list[Answer]:
        """Answers to many questions in one batched pass: each item is `(question, paragraphs)` or
        `(question, paragraphs, id)`, or a dict with `question`, `paragraphs` and optionally `id`."""
        if isinstance(items, tuple) and items and isinstance(items[0], str):
            raise ApiInputError("predict_batch takes a list of (question, paragraphs) items; for one, use predict")
        examples = [_user_example(position, item) for position, item in enumerate(items)]
        ids = [example.id for example in examples]
        if not examples:
            raise ApiInputError("no questions to answer")
        if len(set(ids)) < len(ids):
            repeated = sorted({question_id for question_id in ids if ids.count(question_id) > 1})
            raise ApiInputError(f"ids given twice: {', '.join(repeated)} (each question needs its own id)")
        return self._answer(examples)

    def predict_records(self, records: Iterable[dict[str, Any]]) -> list[Answer]:
        """Answers to records in a supported dataset's own layout (MuSiQue, HotpotQA, 2WikiMultihopQA: as their
        files hold them, labelled or as the official test files, without labels), in order. The labels, when present,
        are read as `evaluate.py run=` reads them (a Step Execution run with `decomposition=gold` follows them)."""
        if isinstance(records, dict):
            raise ApiInputError("predict_records takes a list of records; got one record (a dict): pass [record]")
        examples = []
        for position, record in enumerate(records):
            if not isinstance(record, dict):
                raise ApiInputError(f"record {position}: expected a dict, got {type(record).__name__}")
            data_format = detect_format(record)  # a labelled record of a known layout
            labelled = data_format is not None
            if data_format is None:  # an unlabelled one, as the official test files hold it
                layout = "musique" if "paragraphs" in record else "hotpotqa" if "context" in record else None
                data_format = get_format(layout) if layout else None
            if data_format is None:
                raise ApiInputError(
                    f"record {position}: not a MuSiQue, HotpotQA or 2WikiMultihopQA record (its keys: "
                    f"{', '.join(sorted(record))})"
                )
            try:
                examples.append(data_format.example(record, USER_DATASET, labelled, line=position + 1))
            except MusiqueModelsError as error:
                raise ApiInputError(f"record {position}: {error}") from None
        if not examples:
            raise ApiInputError("no records to answer")
        return self._answer(examples)

    def _answer(self, examples: list[Example]) -> list[Answer]:
        import datasets

        from musique_models.data.features import FEATURES

        table = datasets.Dataset.from_list([example.to_dict() for example in examples], features=FEATURES)
        with tempfile.TemporaryDirectory(prefix="musique-models-api-") as folder:
            with _checked(self.reads):
                predictions = self.predictor.predict(table, Path(folder))
            if predictions is None:
                raise ApiInputError(f"{self.run_dir}: model={self.cfg.model_name} predicts no answers")
            extras = _side_outputs(Path(folder), len(examples))
        answers = []
        for row, (example, prediction) in enumerate(zip(examples, predictions, strict=True)):
            titles = {paragraph.idx: paragraph.title for paragraph in example.paragraphs}
            answers.append(
                Answer(
                    id=prediction.id,
                    answer=prediction.predicted_answer,
                    confidence=float(prediction.predicted_answer_confidence),
                    answerable=bool(prediction.predicted_answerable),
                    support_idxs=list(prediction.predicted_support_idxs),
                    support_titles=[titles.get(idx, "") for idx in prediction.predicted_support_idxs],
                    **extras[row],
                )
            )
        return answers


def load_run(run_dir: str | Path, device: str | None = None, trust_code: bool = False) -> RunPredictor:
    """The finished run (or export) in `run_dir`, every stage's best weights loaded once (nothing trains), on
    `device` (`cpu` or `cuda`; default: the run's trainer's, a GPU when there is one; `cuda` without one runs on the
    CPU). `ApiInputError` for a folder that is not a finished run, or a run made by another major.minor version of
    musique-models (a run made before runs recorded their version is loaded).

    An export is checked before anything in it is used: every file against its checksum, and its config may name
    only classes that musique-models' own configs name, and no model code (`trust_remote_code`); `trust_code=True`
    lifts the second check for an export whose code you trust (a recipe of your own, outside the package)."""
    from musique_models.models.backbone import ExportReads
    from musique_models.recipes.build import instantiate_recipe
    from musique_models.training.stage import StageNotFinishedError

    try:
        run_dir = check_run_folder(run_dir)
    except MusiqueModelsError as error:
        raise ApiInputError(str(error).removeprefix("run=")) from None
    if device is not None and device not in DEVICES:
        raise ApiInputError(f"device={device!r}: expected one of {', '.join(DEVICES)}")
    exported = (run_dir / EXPORT_FILE).exists()
    if not exported and any(run_dir.glob(f"*/{MODULE_FILE}")):
        raise ApiInputError(f"{run_dir}: an export without its {EXPORT_FILE}; copy the whole folder, or export again")
    reads = None
    if exported:  # an export from elsewhere: every file and the config checked before anything in it is used
        try:
            manifest = read_manifest(run_dir)
            check_files(run_dir, manifest)
            if not trust_code:
                check_config(_plain_yaml(run_dir / CONFIG_FILE), manifest, run_dir)
                reads = ExportReads(run_dir, any(entry.get("whole") for entry in manifest["stages"].values()))
        except ExportFormatError as error:
            raise ApiInputError(str(error)) from None
    made_by = _version_of(run_dir)
    if made_by is not None and made_by.split(".")[:2] != musique_models.__version__.split(".")[:2]:
        raise ApiInputError(
            f"{run_dir}: made by musique-models {made_by}, this is {musique_models.__version__}; load it with the "
            "version that made it"
        )
    cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    if not isinstance(cfg, DictConfig) or cfg.get("model") is None:
        raise ApiInputError(f"{run_dir}: the run trained no model (model=null)")
    if device is not None:
        with open_dict(cfg):
            cfg.trainer.accelerator = "gpu" if device == "cuda" else "cpu"
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                log.warning("device=cuda: this machine has no GPU; %s loads on the CPU", run_dir)
    if not exported:
        return RunPredictor(run_dir, cfg, instantiate_recipe(cfg).load(cfg, run_dir))
    with tempfile.TemporaryDirectory(prefix="musique-models-export-") as folder, _checked(reads):
        try:  # the stages are laid out in `folder` only while they load
            laid_out = read_export(run_dir, Path(folder), cfg, trust_code)
            return RunPredictor(run_dir, cfg, instantiate_recipe(cfg).load(cfg, laid_out), reads)
        except (ApiInputError, KeyboardInterrupt):
            raise
        except ExportFormatError as error:
            raise ApiInputError(str(error)) from None
        except StageNotFinishedError:
            held = ", ".join(sorted(path.parent.name for path in Path(folder).glob(f"*/{STAGE_FILE}"))) or "none"
            raise ApiInputError(
                f"{run_dir}: an incomplete export: model={cfg.model_name} needs a stage its {EXPORT_FILE} does not "
                f"list (it lists: {held}); export the run again"
            ) from None
        except Exception as error:  # an export whose files disagree with one another: one line, not a traceback
            reason = " ".join(str(error).split())[:300]
            raise ApiInputError(f"{run_dir}: the export cannot be loaded ({type(error).__name__}: {reason})") from None


def _plain_yaml(path: Path) -> Any:
    """A YAML file as plain data (no OmegaConf: nothing resolved)."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        reason = " ".join(str(error).split())[:200]
        raise ExportFormatError(f"{path}: not readable as YAML ({reason})") from None


def _checked(reads: Any) -> Any:
    """While an export from elsewhere loads or answers: its backbones read only what `reads` allows."""
    from contextlib import nullcontext

    if reads is None:
        return nullcontext()
    from musique_models.models.backbone import reading_an_export

    return reading_an_export(reads)


def _version_of(run_dir: Path) -> str | None:
    path = run_dir / PROVENANCE_FILE
    if not path.exists():
        return None  # a run made before runs recorded it
    try:
        versions = json.loads(path.read_text()).get("versions") or {}
        if not isinstance(versions, dict):
            raise ValueError("`versions` is not an object")
    except (ValueError, AttributeError) as error:
        raise ApiInputError(f"{path}: not a provenance file ({error})") from None
    return versions.get("musique-models")


def _user_example(position: int, item: Sequence[Any] | dict[str, Any]) -> Example:
    """A plain question and its paragraphs as a schema row (no labels)."""
    if isinstance(item, dict):
        question, paragraphs, question_id = item.get("question"), item.get("paragraphs"), item.get("id")
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
        question, paragraphs, question_id = item[0], item[1], item[2] if len(item) == 3 else None
    else:
        raise ApiInputError(f"item {position}: expected (question, paragraphs[, id]) or a dict with them")
    if not isinstance(question, str) or not question.strip():
        raise ApiInputError(f"item {position}: the question must be a non-empty string, got {question!r:.80}")
    if isinstance(paragraphs, str | bytes) or not isinstance(paragraphs, Sequence) or not paragraphs:
        raise ApiInputError(f"item {position}: paragraphs must be a non-empty list of strings or {{title, text}} dicts")
    parsed = []
    for idx, paragraph in enumerate(paragraphs):
        if isinstance(paragraph, str):
            title, text = "", paragraph
        elif isinstance(paragraph, dict) and isinstance(paragraph.get("text"), str):
            title, text = str(paragraph.get("title") or ""), paragraph["text"]
        else:
            raise ApiInputError(f"item {position}, paragraph {idx}: expected a string or a dict with a `text` string")
        parsed.append(Paragraph(idx=idx, title=title, text=text, is_supporting=False))
    return Example(
        id=str(question_id) if question_id is not None else f"q{position}",
        dataset=USER_DATASET,
        question=question,
        paragraphs=parsed,
        answer="",
        answer_aliases=[],
        answerable=True,
        decomposition=[],
        num_hops=0,
    )


def _side_outputs(folder: Path, rows: int) -> list[dict[str, Any]]:
    """Per row, what the predictor wrote beside its predictions into `folder`: the first stage's ranking and chain
    (`selector_ranking.json`), the executed steps (`steps.jsonl`) and every declared side file's records (a
    generative reader's `generation` among them)."""
    extras: list[dict[str, Any]] = [{"side": {}, "steps": []} for _ in range(rows)]
    ranking_file = folder / RANKING_FILE
    if ranking_file.exists():
        record = json.loads(ranking_file.read_text())
        for row, entry in enumerate(record.get("rankings", [])[:rows]):
            extras[row]["ranking"] = list(entry["ranking"])
        for entry in record.get("chains", []):
            extras[entry["row"]]["chain"] = list(entry["chain"])
    if (folder / STEPS_FILE).exists():
        for line in (folder / STEPS_FILE).read_text().splitlines():
            step = json.loads(line)
            extras[step["row"]]["steps"].append({k: v for k, v in step.items() if k not in ("row", "id")})
    for entry in declared_side_files(folder):
        for line in (folder / entry["file"]).read_text().splitlines():
            record = json.loads(line)
            fields = {k: v for k, v in record.items() if k not in ("row", "id")}
            extras[record["row"]]["side"].setdefault(entry["title"], []).append(fields)
            if "generation" in fields:
                extras[record["row"]]["generation"] = fields["generation"]
    return extras
