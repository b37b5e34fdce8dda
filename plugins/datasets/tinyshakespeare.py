"""``singa data tinyshakespeare``: the text files of the char-rnn example.

Reads Karpathy's tiny-shakespeare ``input.txt`` (1,115,394 ASCII characters) and writes, for
the kCharRNN layer:

* ``train.txt``: the first 90% of the characters, ``val.txt``: the remaining 10% (the usual
  char-rnn split, cut at a character boundary);
* ``vocab.txt``: every distinct character of the whole text once, in code-point order; a
  character's index is its position in that file (65 characters).

0.3's examples/char-rnn shipped no converter (it read a raw text and a hand-written
vocabulary); this one makes the split and the vocabulary reproducible.
"""

from __future__ import annotations

from pathlib import Path

from singa_core.dataset import DatasetConverter
from singa_core.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes

TRAIN_FRACTION = 0.9


class TinyShakespeareConverter(DatasetConverter):
    """input.txt -> train.txt, val.txt and vocab.txt."""

    type_names = ("tinyshakespeare",)
    name = "tinyshakespeare"
    description = "tiny-shakespeare text -> train.txt, val.txt, vocab.txt (for kCharRNN)"
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
        src = source_dir / "input.txt"
        try:
            text = src.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SingaError(
                f"input.txt is not UTF-8 text (byte {exc.start})",
                where=str(src),
                help="replace it with the tiny-shakespeare input.txt",
            ) from None
        cut = int(len(text) * TRAIN_FRACTION)
        vocab = "".join(sorted(set(text)))
        written = []
        for name, part in (
            ("train.txt", text[:cut]),
            ("val.txt", text[cut:]),
            ("vocab.txt", vocab),
        ):
            path = out_dir / name
            atomic_write_bytes(path, part.encode("utf-8"), what=name)
            log(f"wrote {len(part):,} characters to {path}")
            written.append(path)
        return written
