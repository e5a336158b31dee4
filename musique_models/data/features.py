"""`datasets.Features` matching the `Example` schema: the layout of the Arrow cache."""

import datasets

FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "dataset": datasets.Value("string"),
        "question": datasets.Value("string"),
        "paragraphs": datasets.List(
            {
                "idx": datasets.Value("int32"),
                "title": datasets.Value("string"),
                "text": datasets.Value("string"),
                "is_supporting": datasets.Value("bool"),
                "sentences": datasets.List(datasets.Value("string")),
                "supporting_sentence_ids": datasets.List(datasets.Value("int32")),
            }
        ),
        "answer": datasets.Value("string"),
        "answer_aliases": datasets.List(datasets.Value("string")),
        "answerable": datasets.Value("bool"),
        "decomposition": datasets.List(
            {
                "question": datasets.Value("string"),
                "answer": datasets.Value("string"),
                "paragraph_support_idx": datasets.Value("int32"),
            }
        ),
        "num_hops": datasets.Value("int32"),
        "question_type": datasets.Value("string"),
    }
)
