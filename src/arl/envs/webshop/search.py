"""The search engine: BM25 over product documents with ``bm25s``.

As the reference (pyserini/Lucene over ``convert_product_file_format.py`` documents), a product's
document is its title, description, first bullet point and options text
(``name: v1, v2, and name: ...``), lower case; a search returns up to 50 products with a positive
score, best first. BM25 with Lucene's scoring and pyserini's defaults k1 = 0.9, b = 0.4. Text is
split into alphanumeric tokens, English stop words are dropped, and plurals are folded with
Harman's S-stemmer (Lucene's default analyzer uses Porter; the plural folding is what matters for
product queries). Ties keep catalogue order, so results are deterministic.

``bm25s`` is imported lazily: installing the ``webshop`` extra (``pip install arl[webshop]``)
brings it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from arl.envs.webshop.catalogue import Product

SEARCH_RETURN_N = 50
MAX_QUERY_CHARS = 500  # longer queries are cut (a 100k-character "query" is not a search)

# Lucene's English stop words (StandardAnalyzer / EnglishAnalyzer).
SEARCH_STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with"]
)
_TOKEN_RE = re.compile(r"[a-z0-9]+")
_POSSESSIVE_RE = re.compile(r"['’]s\b")


def _import_bm25s():
    try:
        import bm25s  # optional: the webshop extra
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the webshop environment searches with bm25s, which is not installed: "
            "pip install arl[webshop]  (or: pip install bm25s)"
        ) from err
    return bm25s


def stem(word: str) -> str:
    """Harman's S-stemmer: ``ies -> y``, ``es -> e``, ``s -> ''`` with its exceptions."""
    if len(word) <= 3:
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Search tokens of ``text``: lower case alphanumeric runs, possessive ``'s`` dropped, stop
    words removed, plurals folded."""
    text = _POSSESSIVE_RE.sub("", str(text).lower())
    return [stem(t) for t in _TOKEN_RE.findall(text) if t not in SEARCH_STOPWORDS]


def document_text(product: Product) -> str:
    """The indexed text of a product (as the reference's search-engine documents)."""
    option_texts = [f"{name}: {', '.join(values)}" for name, values in product.options]
    parts = [product.title, product.description, product.features[0] if product.features else "",
             ", and ".join(option_texts)]
    return " ".join(parts).lower()


class SearchIndex:
    """BM25 index of a catalogue.

    Args:
        products: the catalogue; results are ASINs of these.
        k1, b: BM25 parameters (pyserini's defaults).
        return_n: the most results one search returns.
    """

    def __init__(self, products: Sequence[Product], k1: float = 0.9, b: float = 0.4, return_n: int = SEARCH_RETURN_N):
        bm25s = _import_bm25s()
        self._np = np
        self.asins = [p.asin for p in products]
        self.return_n = int(return_n)
        corpus = [tokenize(document_text(p)) or ["__empty__"] for p in products]
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index(corpus, show_progress=False)
        self._vocab = set(self._bm25.vocab_dict)
        self._cache: dict[tuple[str, ...], list[str]] = {}

    def clear_cache(self) -> None:
        """Forget cached results (benchmarks time uncached searches)."""
        self._cache.clear()

    def search(self, query: str, k: int | None = None) -> list[str]:
        """ASINs of the best ``k`` (default ``return_n``) products for ``query``, best first;
        only products with a positive score; ``[]`` when no query token is known."""
        k = self.return_n if k is None else int(k)
        tokens = tuple(t for t in tokenize(str(query)[:MAX_QUERY_CHARS]) if t in self._vocab)
        if not tokens or k <= 0:
            return []
        key = tokens + (f"#{k}",)
        hit = self._cache.get(key)
        if hit is not None:
            return list(hit)
        np = self._np
        scores = np.asarray(self._bm25.get_scores(list(tokens)), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")[:k]
        result = [self.asins[i] for i in order if scores[i] > 0]
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = result
        return list(result)
