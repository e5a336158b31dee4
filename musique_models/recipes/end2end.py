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

from musique_models.evaluation.predictions import Prediction
from musique_models.features.context import ContextBuilder
from musique_models.features.end2end import featurize_end2end
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.end2end import End2EndReader
from musique_models.recipes.base import RunContext
from musique_models.recipes.reader import fit_and_predict_reader
from musique_models.training.datamodule import QADataModule, featurize


class End2End:
    """The End2End recipe (`model=end2end`, and `model=c_only` with `empty_question`): featurise, fit, predict.

    `reader` holds the stage settings (lr, warmup, clipping caps, batch, epochs); `max_paragraph_tokens` comes
    from the dataset (250 MuSiQue, 300 HotpotQA, 500 2Wiki).
    """

    def __init__(
        self,
        reader: DictConfig,
        empty_question: bool = False,
        eval_batch_size: int = 2,
        num_workers: int = 0,
        name: str = "end2end",
    ) -> None:
        self.name = name
        self.reader_cfg = reader
        self.empty_question = empty_question
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def run(self, context: RunContext) -> list[Prediction]:
        cfg = context.cfg
        backbone: BackboneSpec = instantiate(self.reader_cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        include_title = bool(cfg.dataset.get("include_title", False))
        settings = {
            "max_question_tokens": self.reader_cfg.max_question_tokens,
            "max_paragraph_tokens": self.reader_cfg.max_paragraph_tokens,
            "max_length": min(self.reader_cfg.max_length, backbone.max_length),
            "include_title": include_title,
            "empty_question": self.empty_question,
        }
        cache = f"{cfg.paths.cache_dir}/features"
        train_table, eval_table = _in_dataset_order(context.train), _in_dataset_order(context.evaluation)
        train_rows = featurize(train_table, featurize_end2end, tokenizer, cache, f"{self.name}-train", **settings)
        eval_rows = featurize(eval_table, featurize_end2end, tokenizer, cache, f"{self.name}-eval", **settings)
        reader = End2EndReader(
            backbone,
            len(tokenizer),
            gradient_checkpointing=self.reader_cfg.gradient_checkpointing,
            answerability_head=context.has_unanswerable,
            answer_type_head=bool(cfg.dataset.get("yes_no_answers", False)),
            lr=self.reader_cfg.lr,
            warmup_ratio=self.reader_cfg.warmup_ratio,
            max_answer_tokens=self.reader_cfg.max_answer_tokens,
            single_support=self.reader_cfg.single_support,
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
        return fit_and_predict_reader(
            self.name, reader, data, context, self.reader_cfg, ContextBuilder(eval_table, include_title)
        )


def _in_dataset_order(table: datasets.Dataset) -> datasets.Dataset:
    """The table with `selected_idxs` = every paragraph in dataset order (EE reads them all)."""
    return table.add_column(
        "selected_idxs", [[paragraph["idx"] for paragraph in paragraphs] for paragraphs in table["paragraphs"]]
    )
