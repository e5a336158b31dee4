"""MuSiQue metrics as a local `evaluate` module (the hub's `evaluate.load("squad")` is out of reach offline).

    import evaluate
    from musique_models.evaluation.musique_metric import MODULE_PATH
    metric = evaluate.load(MODULE_PATH)
    metric.compute(predictions=[{"id": ..., "predicted_answer": ..., "predicted_support_idxs": [...],
                                 "predicted_answerable": True}],
                   references=[{"id": ..., "answers": [...], "support_idxs": [...], "answerable": True,
                                "num_hops": 2}])

It calls the package's one metrics implementation (`musique_models.evaluation.metrics`).
"""

import datasets

import evaluate
from musique_models.evaluation.evaluator import score_instance
from musique_models.evaluation.gold import GoldInstance
from musique_models.evaluation.metrics import aggregate
from musique_models.evaluation.predictions import Prediction

_CITATION = """@article{trivedi2022musique,
  title={MuSiQue: Multihop Questions via Single-hop Question Composition},
  author={Trivedi, Harsh and Balasubramanian, Niranjan and Khot, Tushar and Sabharwal, Ashish},
  journal={Transactions of the Association for Computational Linguistics}, volume={10}, year={2022}}"""

_DESCRIPTION = "MuSiQue answer (An), support (Sp), answerability (Sf) and paired MuSiQue-Full metrics."

_KWARGS_DESCRIPTION = """
Args:
    predictions: dicts with id, predicted_answer, predicted_support_idxs, predicted_answerable.
    references: dicts with id, answers (answer first, then aliases), support_idxs, answerable, num_hops.
Returns:
    answer_f1, answer_em, support_f1, support_em, per-hop keys, and for MuSiQue-Full the sufficiency and
    group_*_sufficiency_* keys, as floats in [0, 1].
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MusiqueMetric(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {
                        "id": datasets.Value("string"),
                        "predicted_answer": datasets.Value("string"),
                        "predicted_support_idxs": datasets.Sequence(datasets.Value("int32")),
                        "predicted_answerable": datasets.Value("bool"),
                    },
                    "references": {
                        "id": datasets.Value("string"),
                        "answers": datasets.Sequence(datasets.Value("string")),
                        "support_idxs": datasets.Sequence(datasets.Value("int32")),
                        "answerable": datasets.Value("bool"),
                        "num_hops": datasets.Value("int32"),
                    },
                }
            ),
            reference_urls=["https://github.com/StonyBrookNLP/musique"],
        )

    def _compute(self, predictions, references):
        results = []
        for row, (prediction, reference) in enumerate(zip(predictions, references)):
            if prediction["id"] != reference["id"]:
                raise ValueError(f"row {row}: prediction id {prediction['id']!r} != reference id {reference['id']!r}")
            gold = GoldInstance(
                row=row,
                id=reference["id"],
                answers=tuple(reference["answers"]),
                support_idxs=tuple(reference["support_idxs"]),
                paragraph_idxs=frozenset(),
                answerable=reference["answerable"],
                num_hops=reference["num_hops"],
            )
            results.append(
                score_instance(
                    gold,
                    Prediction(
                        id=prediction["id"],
                        predicted_answer=prediction["predicted_answer"],
                        predicted_support_idxs=list(prediction["predicted_support_idxs"]),
                        predicted_answerable=prediction["predicted_answerable"],
                    ),
                )
            )
        return aggregate(results)
