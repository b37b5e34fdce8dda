"""Reading the text and vocabulary files of the char-rnn layers (kCharRNN, kCharRNNOutput).

A vocabulary file lists every character once; a character's index is its 0-based position
in the file (0.3's intended mapping — its code relied on C++ evaluation order and gave the
first character −1 under GCC, see docs/compat.md). Files are read as UTF-8 text with
newlines kept as they are, so ``"\\n"`` is a character like any other.
"""

from __future__ import annotations

import os

import numpy as np

from singa_core.layer import Layer


def read_text_file(layer: Layer, path: str, field: str, what: str) -> str:
    if not path:
        raise layer.error(
            f"layer '{layer.name}' needs {field}",
            field=field.rsplit(".", 1)[0],
            help=f'add `{field.rsplit(".", 1)[1]}: "path/to/file"` ({what})',
        )
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        notes = []
        if not os.path.isabs(path):
            notes.append(f"relative paths are resolved from the current directory {os.getcwd()}")
        err = layer.error(
            f"layer '{layer.name}': {what} {path} does not exist",
            field=field,
            help="run `singa data tinyshakespeare` to write train.txt, val.txt and vocab.txt, "
            "or correct the path",
        )
        err.notes.extend(notes)
        raise err from None
    except UnicodeDecodeError as exc:
        raise layer.error(
            f"layer '{layer.name}': {what} {path} is not UTF-8 text (byte {exc.start})",
            field=field,
            help="the char-rnn layers read UTF-8 (or ASCII) text files",
        ) from None
    except OSError as exc:
        raise layer.error(
            f"layer '{layer.name}': cannot read {what} {path}: {exc.strerror}",
            field=field,
            help="check the path and the file's permissions",
        ) from None


def read_vocab(layer: Layer, path: str, field: str) -> str:
    """The vocabulary as a string: character k has index k. Repeats are an error."""
    vocab = read_text_file(layer, path, field, "vocabulary file")
    if not vocab:
        raise layer.error(
            f"layer '{layer.name}': vocabulary file {path} is empty",
            field=field,
            help="the file lists every character of the text once",
        )
    seen: dict[str, int] = {}
    for k, ch in enumerate(vocab):
        if ch in seen:
            raise layer.error(
                f"layer '{layer.name}': vocabulary file {path} lists {ch!r} twice "
                f"(positions {seen[ch]} and {k})",
                field=field,
                help="list each character once; its position is its index",
            )
        seen[ch] = k
    return vocab


def encode(layer: Layer, text: str, vocab: str, path: str, field: str) -> np.ndarray:
    """The text as an int32 array of vocabulary indices; a character outside the vocabulary
    is an error naming its line and column."""
    index = {ch: k for k, ch in enumerate(vocab)}
    try:
        if all(ord(ch) < 256 for ch in vocab) and text.isascii():
            table = np.full(256, -1, dtype=np.int32)
            for ch, k in index.items():
                table[ord(ch)] = k
            codes = table[np.frombuffer(text.encode("latin-1"), dtype=np.uint8)]
            if codes.size and codes.min() < 0:
                raise KeyError(text[int(np.argmin(codes))])
            return codes
        return np.array([index[ch] for ch in text], dtype=np.int32)
    except KeyError as exc:
        ch = exc.args[0]
        pos = text.index(ch)
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        raise layer.error(
            f"layer '{layer.name}': {path}:{line}:{col}: character {ch!r} is not in the vocabulary",
            field=field,
            help="use the vocab.txt written for this text by `singa data tinyshakespeare`, "
            "or add the character to the vocabulary file",
        ) from None
