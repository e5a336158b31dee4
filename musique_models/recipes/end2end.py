"""The End2End recipe (`model=end2end`) and the C-only baseline (`model=c_only`): featurise every paragraph in
dataset order into one long input, fit the Longformer reader (`musique_models.models.end2end.End2EndReader`),
predict.

C-only (the paper's context-only artifact baseline) is the same recipe with an empty question: global attention
on the markers only. What it scores is what a dataset gives away without its question.
"""

from __future__ import annotations

import datasets
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.end2end import featurize_end2end
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.end2end import End2EndReader
from musique_models.recipes.base import RunContext
from musique_models.recipes.reader import (
    YES_NO_MODES,
    FittedReader,
    fit_reader,
    predict_reader,
    reader_kwargs,
    single_input_settings,
    yes_no_setup,
)
from musique_models.training.datamodule import QADataModule, featurize


class End2End:
    """The End2End recipe (`model=end2end`, and `model=c_only` with `empty_question`): featurise, fit, predict.

    `reader` holds the stage settings (lr, schedule, clipping caps, batch, epochs); `max_paragraph_tokens` comes
    from the dataset (250 MuSiQue, 300 HotpotQA, 500 2Wiki). `yes_no`: `prefix` (official) or `head`, see
    `yes_no_setup`.
    """

    def __init__(
        self,
        reader: DictConfig,
        yes_no: str = "prefix",
        empty_question: bool = False,
        eval_batch_size: int = 2,
        num_workers: int = 0,
        name: str = "end2end",
    ) -> None:
        self.name = name
        self.reader_cfg = reader
        self.empty_question = empty_question
        self.yes_no = yes_no
        check_choice("model.yes_no", yes_no, YES_NO_MODES)
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def run(self, context: RunContext) -> list[Prediction]:
        fitted, data, eval_table = self.fit(context)
        return predict_reader(fitted.reader, data, context, fitted.context_builder(eval_table))

    def fit(self, context: RunContext, name: str | None = None) -> tuple[FittedReader, QADataModule, datasets.Dataset]:
        """Fit the reader as stage `name` (the recipe's name by default) on `context`'s splits. Returns the best reader with what featurises for it, its datamodule and
        the evaluation split with `selected_idxs` (every paragraph in dataset order)."""
        cfg = context.cfg
        name = name or self.name
        backbone: BackboneSpec = instantiate(self.reader_cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        include_title = bool(cfg.dataset.get("include_title", False))
        prefix, answer_type_head = yes_no_setup(cfg, self.yes_no)
        settings = single_input_settings(self.reader_cfg, backbone, include_title, prefix, self.empty_question)
        cache = f"{cfg.paths.cache_dir}/features"
        train_table, eval_table = in_dataset_order(context.train), in_dataset_order(context.evaluation)
        train_rows = featurize(train_table, featurize_end2end, tokenizer, cache, f"{name}-train", **settings)
        eval_rows = featurize(eval_table, featurize_end2end, tokenizer, cache, f"{name}-eval", **settings)
        reader = End2EndReader(
            backbone,
            len(tokenizer),
            gradient_checkpointing=self.reader_cfg.gradient_checkpointing,
            answerability_head=context.has_unanswerable,
            answer_type_head=answer_type_head,
            single_support=self.reader_cfg.single_support,
            **reader_kwargs(self.reader_cfg),
        )
        data = QADataModule.for_tokenizer(
            tokenizer,
            train_rows,
            eval_rows,
            batch_size=self.reader_cfg.micro_batch_size,
            eval_batch_size=self.eval_batch_size,
            num_workers=self.num_workers,
            seed=cfg.seed,
        )
        fitted = FittedReader(reader, tokenizer, featurize_end2end, settings, include_title, prefix)
        fitted.reader = fit_reader(name, reader, data, context, self.reader_cfg, fitted.context_builder(eval_table))
        return fitted, data, eval_table


def in_dataset_order(table: datasets.Dataset) -> datasets.Dataset:
    """The table with `selected_idxs` = every paragraph in dataset order (EE reads them all)."""
    return table.add_column(
        "selected_idxs", [[paragraph["idx"] for paragraph in paragraphs] for paragraphs in table["paragraphs"]]
    )
