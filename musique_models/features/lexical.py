"""BM25 over each question's own paragraphs: the first stage of Lexical SA (`recipes/lexical.py`), a ranker that
trains nothing.

Each question's paragraphs are a corpus of their own (the inverse document frequencies are the question's, as a
selector that sees only those paragraphs would have them); a paragraph's text is its title and text when
`include_title`, else its text. Scoring is Okapi BM25 as `bm25s` computes it (Lù, 2024; `method="lucene"`:
Lucene's variant, the default of Pyserini/Anserini), its tokenizer lower-casing, keeping words of two or more
characters and dropping English stop words. Ties (a question that shares no word with two paragraphs) keep the
dataset's order.
"""

from __future__ import annotations

import bm25s

BM25_METHODS = ("robertson", "lucene", "bm25l", "bm25+", "atire")


def bm25_scores(
    question: str,
    paragraphs: list[dict],
    k1: float = 1.5,
    b: float = 0.75,
    method: str = "lucene",
    include_title: bool = True,
) -> list[float]:
    """BM25 score of each paragraph (`{"title", "text"}`) for `question`, in the paragraphs' order; 0 for every
    paragraph when none shares a word with it."""
    if not paragraphs:
        return []
    texts = [f"{p['title']} {p['text']}" if include_title else p["text"] for p in paragraphs]
    corpus = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    query = bm25s.tokenize([question], stopwords="en", show_progress=False, return_ids=False)[0]
    if not query or not corpus.vocab:  # nothing to match (bm25s cannot index a corpus without words)
        return [0.0] * len(paragraphs)
    index = bm25s.BM25(k1=k1, b=b, method=method)
    index.index(corpus, show_progress=False)
    return [float(score) for score in index.get_scores(query)]


def bm25_ranking(
    question: str, paragraphs: list[dict], **settings: float | str | bool
) -> tuple[list[int], list[float]]:
    """The paragraphs' `idx`, best BM25 score first (ties in the paragraphs' order), and every paragraph's score in
    the paragraphs' order (`settings`: `bm25_scores`'s)."""
    scores = bm25_scores(question, paragraphs, **settings)  # type: ignore[arg-type]
    order = sorted(range(len(paragraphs)), key=lambda position: -scores[position])  # stable: ties keep order
    return [paragraphs[position]["idx"] for position in order], scores
