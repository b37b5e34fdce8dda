"""``singa data rnnlm`` and ``singa data rnnlm-shakespeare``: the stores the job reads.

* ``rnnlm`` is 0.3's ``make create``: rnnlm-0.4b's ``train``, ``valid`` and ``test`` text
  files (``--from DIR``) → ``train_data.bin``, ``valid_data.bin``, ``test_data.bin`` with
  100 word classes (0.3's Makefile), plus ``vocab.txt``.
* ``rnnlm-shakespeare`` makes a corpus of the same kind and size from tiny-shakespeare (the
  rnnlm-0.4b download is no longer at the address 0.3 gave), then converts it the same way.
  Each non-empty line of ``input.txt`` that has words is a sentence: lower-cased words of
  letters and inner apostrophes, punctuation dropped. The first 10,000 sentences are the
  training text (0.3's set had 10,000 training sentences); the sentences after them make
  the validation text, exactly as many as kData reads in 683 windows of 10 words (the
  job's ``validate_steps: 683``: one validation pass reads it once); the next 1,000 the
  test text. Words outside the 3,718 most frequent training words become ``<unk>``, so with
  ``</s>`` the vocabulary has 3,720 words: 0.3's ``vocab_size: 3720``. The three texts are
  written too (``train.txt``, ``valid.txt``, ``test.txt``, one sentence per line).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from singa_core.dataset import DatasetConverter
from singa_core.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes

from singa_rnnlm.corpus import (
    END_OF_SENTENCE,
    learn_vocabulary,
    perplexity_of_unigram,
    read_words,
    windows,
    write_store,
    write_vocabulary,
)

CLASS_SIZE = 100  # 0.3's Makefile: numclass = 100
MAX_WINDOW = 10  # job.conf: max_window: 10
OUTPUTS = {"train": "train_data.bin", "valid": "valid_data.bin", "test": "test_data.bin"}


def kvfile_factory():
    from singa_core.plugin_host.host import get_host

    return get_host().get("store", "kvfile")


def convert_texts(texts: dict[str, str], out_dir: Path, log, class_size: int = CLASS_SIZE):
    """``texts`` ("train", "valid", "test" → text) → the stores and vocab.txt in
    ``out_dir``; returns the paths written."""
    split = {name: read_words(text) for name, text in texts.items()}
    vocab = learn_vocabulary(split["train"], class_size)
    log(
        f"vocabulary: {vocab.size} words (vocab_size), {vocab.num_classes} classes (nclass), "
        f"learned from {len(split['train']):,} training words"
    )
    store_cls, written = kvfile_factory(), []
    for name, words in split.items():
        path = out_dir / OUTPUTS[name]
        n, skipped = write_store(words, vocab, path, store_cls)
        sentences = sum(1 for w in words if w == END_OF_SENTENCE)
        log(
            f"wrote {n:,} words ({sentences:,} sentences, {windows(words, MAX_WINDOW):,} "
            f"windows of {MAX_WINDOW}) to {path}"
            + (f"; skipped {skipped:,} unknown words" if skipped else "")
            + (
                f"; unigram perplexity {perplexity_of_unigram(vocab, words):.1f}"
                if name != "train"
                else ""
            )
        )
        written.append(path)
    vocab_path = out_dir / "vocab.txt"
    write_vocabulary(vocab, vocab_path)
    written.append(vocab_path)
    return written


def read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SingaError(
            f"{path.name} is not UTF-8 text (byte {exc.start})",
            where=str(path),
            help="the corpus must be plain text, one sentence per line",
        ) from None


class RnnlmConverter(DatasetConverter):
    """rnnlm-0.4b's train/valid/test → WordRecord stores (0.3's create_data)."""

    type_names = ("rnnlm",)
    name = "rnnlm"
    description = (
        "rnnlm-0.4b text (train, valid, test: one sentence per line) -> train_data.bin, "
        "valid_data.bin, test_data.bin (WordRecords, 100 classes) for examples/rnnlm"
    )
    env_subdir = "rnnlm"
    files = {name: ("", 0, None) for name in OUTPUTS}

    def convert(self, source_dir: Path, out_dir: Path, log) -> list[Path]:
        texts = {name: read_text(source_dir / name) for name in OUTPUTS}
        return convert_texts(texts, out_dir, log)


# -- tiny-shakespeare ----------------------------------------------------------------------
TRAIN_SENTENCES = 10_000
VALID_WINDOWS = 683  # job.conf: validate_steps: 683
TEST_SENTENCES = 1_000
KEEP_WORDS = 3_718  # + "<unk>" + "</s>" = 0.3's vocab_size 3720
UNKNOWN = "<unk>"
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def shakespeare_sentences(text: str) -> list[list[str]]:
    """The sentences of tiny-shakespeare: the words of each line that has any."""
    out = []
    for line in text.split("\n"):
        words = _WORD.findall(line.lower())
        if words:
            out.append(words)
    return out


def shakespeare_corpus(text: str) -> dict[str, list[list[str]]]:
    """Split into train / valid / test sentences and replace rare words by ``<unk>``."""
    sentences = shakespeare_sentences(text)
    train = sentences[:TRAIN_SENTENCES]
    valid, used, k = [], 0, TRAIN_SENTENCES
    while used < VALID_WINDOWS and k < len(sentences):
        need = -(-(len(sentences[k]) + 1) // MAX_WINDOW)  # windows of words + "</s>"
        if used + need <= VALID_WINDOWS:
            valid.append(sentences[k])
            used += need
        k += 1
    test = sentences[k : k + TEST_SENTENCES]
    if len(test) < TEST_SENTENCES:
        raise SingaError(
            f"input.txt has only {len(sentences)} sentences; the rnnlm corpus needs more",
            help="use the complete tiny-shakespeare input.txt",
        )
    counts = Counter(w for s in train for w in s)
    keep = {w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:KEEP_WORDS]}
    return {
        name: [[w if w in keep else UNKNOWN for w in s] for s in part]
        for name, part in (("train", train), ("valid", valid), ("test", test))
    }


class RnnlmShakespeareConverter(DatasetConverter):
    """tiny-shakespeare → an rnnlm-0.4b-sized word corpus → WordRecord stores."""

    type_names = ("rnnlm-shakespeare",)
    name = "rnnlm-shakespeare"
    description = (
        "tiny-shakespeare input.txt -> a word corpus of 0.3's rnnlm size (10,000 training "
        "sentences, vocabulary 3720, 100 classes) and its stores for examples/rnnlm"
    )
    env_subdir = "tinyshakespeare"
    files = {
        "input.txt": (
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            1115394,
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
            "tinyshakespeare/input.txt",
        )
    }

    def convert(self, source_dir: Path, out_dir: Path, log) -> list[Path]:
        corpus = shakespeare_corpus(read_text(source_dir / "input.txt"))
        texts, written = {}, []
        for name, sentences in corpus.items():
            texts[name] = "".join(" ".join(s) + "\n" for s in sentences)
            path = out_dir / f"{name}.txt"
            atomic_write_bytes(path, texts[name].encode("utf-8"), what=f"{name} text")
            written.append(path)
        log(f"wrote the word corpus (train.txt, valid.txt, test.txt) to {out_dir}")
        return written + convert_texts(texts, out_dir, log)
