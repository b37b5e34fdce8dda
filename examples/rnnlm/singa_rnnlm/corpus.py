"""0.3's examples/rnnlm/create_data.cc (after Mikolov's rnnlm-0.4b): text → WordRecord stores.

The corpus is plain text, one sentence per line, words separated by spaces or tabs
(rnnlm-0.4b's ``train``/``valid``/``test`` files). Reading it as 0.3 did:

* every end of line is the word ``"</s>"``; carriage returns are ignored;
* the vocabulary is learned from the training text: ``"</s>"`` is word 0, then every other
  word by descending count (ties in order of first appearance: 0.3's selection sort left
  tied words in an order that depended on its swaps);
* words are split into ``class_size`` classes by the "old classes" rule: walking the
  vocabulary in order, a word goes to class ``a`` and ``a`` advances (up to
  ``class_size − 1``) when the cumulative unigram frequency passes ``(a + 1)/class_size``;
  each class is a contiguous range ``[class_start, class_end)`` of word indices;
* each file becomes a store with one WordRecord per word, keys ``"%05d"`` (the running
  number of words written); words of the valid/test text missing from the vocabulary are
  skipped, as 0.3 did.

Not kept from 0.3: words longer than 99 bytes were cut (here they are kept whole), and the
last word of a file without a final newline was dropped (here it is read).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from singa_core.errors import SingaError
from singa_core.store import KCREATE

from singa_rnnlm import rnnlm_pb2

END_OF_SENTENCE = "</s>"


def read_words(text: str) -> list[str]:
    """The words of ``text`` in order, ``"</s>"`` at every end of line."""
    words: list[str] = []
    for k, line in enumerate(text.replace("\r", "").split("\n")):
        if k:
            words.append(END_OF_SENTENCE)
        words.extend(line.replace("\t", " ").split(" "))
    return [w for w in words if w]


@dataclass
class Vocabulary:
    words: list[str]  # index -> word; words[0] == "</s>"
    counts: list[int]
    classes: list[int]  # index -> class
    class_start: list[int]  # class -> first word index
    class_end: list[int]  # class -> one past the last word index

    @property
    def size(self) -> int:
        return len(self.words)

    @property
    def num_classes(self) -> int:
        return len(self.class_start)

    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}


def learn_vocabulary(train_words: Iterable[str], class_size: int) -> Vocabulary:
    """0.3's ``learnVocabFromTrainFile`` + ``sortVocab`` + ``splitClasses`` (old classes)."""
    if class_size <= 0:
        raise SingaError(
            f"the number of word classes must be positive, got {class_size}",
            help="0.3's Makefile used 100 classes",
        )
    counts = Counter(train_words)  # insertion order = order of first appearance
    eos = counts.pop(END_OF_SENTENCE, 0)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: ties keep first-seen order
    words = [END_OF_SENTENCE] + [w for w, _ in ranked]
    cnt = [eos] + [c for _, c in ranked]
    total = sum(cnt)
    if total == 0:
        raise SingaError("the training text has no words", help="give a non-empty text file")
    classes, a, cum = [], 0, 0.0
    for c in cnt:
        cum = min(cum + c / total, 1.0)
        classes.append(a)
        if cum > (a + 1) / class_size and a < class_size - 1:
            a += 1
    num = max(classes) + 1
    start, end = [len(words)] * num, [0] * num
    for i, c in enumerate(classes):
        start[c] = min(start[c], i)
        end[c] = max(end[c], i + 1)
    return Vocabulary(words, cnt, classes, start, end)


def windows(words: Iterable[str], max_window: int) -> int:
    """How many windows kData reads to go once through ``words`` (each window holds up to
    ``max_window`` words and ends after a ``"</s>"``)."""
    n, run = 0, 0
    for w in words:
        run += 1
        if w == END_OF_SENTENCE or run == max_window:
            n, run = n + 1, 0
    return n + (1 if run else 0)


def write_store(
    words: Iterable[str], vocab: Vocabulary, path: Path, store_factory: Callable[[], object]
) -> tuple[int, int]:
    """Write one WordRecord per in-vocabulary word to a new store at ``path`` (written
    atomically by the store). Returns (records written, words skipped as unknown)."""
    index = vocab.index()
    rec = rnnlm_pb2.WordRecord()
    store = store_factory()
    store.open(str(path), KCREATE)
    written = skipped = 0
    try:
        for word in words:
            i = index.get(word)
            if i is None:
                skipped += 1
                continue
            c = vocab.classes[i]
            rec.word, rec.word_index, rec.class_index = word, i, c
            rec.class_start, rec.class_end = vocab.class_start[c], vocab.class_end[c]
            store.write(b"%05d" % written, rec.SerializeToString())
            written += 1
    except BaseException:
        abort = getattr(store, "abort", None)
        if abort is not None:
            abort()
        raise
    store.close()
    return written, skipped


def write_vocabulary(vocab: Vocabulary, path: Path) -> None:
    """``index word count class`` per line (for reading; the job does not need it)."""
    from singa_core.running.fileio import atomic_write_bytes

    lines = [
        f"{i} {w} {c} {k}\n"
        for i, (w, c, k) in enumerate(zip(vocab.words, vocab.counts, vocab.classes, strict=True))
    ]
    atomic_write_bytes(path, "".join(lines).encode("utf-8"), what="vocabulary")


def perplexity_of_unigram(vocab: Vocabulary, words: Iterable[str]) -> float:
    """The perplexity of the training unigram distribution on ``words`` (in-vocabulary
    words only): the baseline a language model has to beat."""
    index, total = vocab.index(), sum(vocab.counts)
    nll, n = 0.0, 0
    for w in words:
        i = index.get(w)
        if i is not None and vocab.counts[i]:
            nll -= math.log(vocab.counts[i] / total)
            n += 1
    return math.exp(nll / max(n, 1))
