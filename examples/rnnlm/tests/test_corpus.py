"""The data converter: 0.3's create_data rules (vocabulary order, old classes, records)."""

from __future__ import annotations

import pytest
from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.store import KREAD

from singa_rnnlm import rnnlm_pb2
from singa_rnnlm.converters import shakespeare_sentences
from singa_rnnlm.corpus import learn_vocabulary, read_words, windows, write_store


def test_read_words_marks_line_ends():
    assert read_words("a  b\tc\r\n\nd") == ["a", "b", "c", "</s>", "</s>", "d"]


def test_vocabulary_order_and_old_classes():
    # counts: b 3, a 2, </s> 2, c 1 (8 in all); cumulative mass 2/8, 5/8, 7/8, 8/8
    vocab = learn_vocabulary(read_words("b a b\nc b a\n"), class_size=2)
    assert vocab.words == ["</s>", "b", "a", "c"]  # "</s>" first, then by count
    assert vocab.counts == [2, 3, 2, 1]
    # class 0 until the mass passes 1/2 (at "b", which still belongs to it), then class 1
    assert vocab.classes == [0, 0, 1, 1]
    assert (vocab.class_start, vocab.class_end) == ([0, 2], [2, 4])


def test_ties_keep_the_order_of_first_appearance_and_classes_stay_below_class_size():
    vocab = learn_vocabulary(read_words("x y z w\n"), class_size=100)
    assert vocab.words == ["</s>", "x", "y", "z", "w"]
    # mass 1/5 per word passes a threshold every word: one class each, never past 99
    assert vocab.classes == [0, 1, 2, 3, 4] and vocab.num_classes == 5
    with pytest.raises(SingaError, match="must be positive"):
        learn_vocabulary(["a"], 0)


def test_windows_count():
    words = read_words("a b c d e\nb a\nc\n")
    assert windows(words, 3) == 4  # [a b c] [d e </s>] [b a </s>] [c </s>]
    assert windows(words, 10) == 3
    assert windows(["a", "b"], 10) == 1  # an unfinished last sentence still takes a window


def test_store_holds_one_word_record_per_known_word(tmp_path):
    vocab = learn_vocabulary(read_words("b a b\nc b a\n"), class_size=2)
    path = tmp_path / "valid.bin"
    written, skipped = write_store(
        read_words("a q c\n"), vocab, path, get_host().get("store", "kvfile")
    )
    assert (written, skipped) == (3, 1)  # "q" is not in the vocabulary: skipped, as 0.3
    store = get_host().get("store", "kvfile")()
    store.open(str(path), KREAD)
    got = []
    while (rec := store.read()) is not None:
        word = rnnlm_pb2.WordRecord.FromString(rec[1])
        got.append(
            (rec[0], word.word, word.word_index, word.class_index, word.class_start, word.class_end)
        )
    store.close()
    assert got == [
        (b"00000", "a", 2, 1, 2, 4),
        (b"00001", "c", 3, 1, 2, 4),
        (b"00002", "</s>", 0, 0, 0, 2),
    ]


def test_shakespeare_sentences():
    text = "First Citizen:\nBefore we proceed, hear me speak.\n\n--\nI'll ne'er do't!\n"
    assert shakespeare_sentences(text) == [
        ["first", "citizen"],
        ["before", "we", "proceed", "hear", "me", "speak"],
        ["i'll", "ne'er", "do't"],
    ]


def test_singa_data_rnnlm_converts_rnnlm_0_4b_files(tmp_path):
    from singa_core.commands.datasets import prepare_dataset

    src, out = tmp_path / "rnnlm-0.4b", tmp_path / "out"
    src.mkdir()
    (src / "train").write_text("b a b\nc b a\n")
    (src / "valid").write_text("a b\n")
    (src / "test").write_text("c q\n")
    written = prepare_dataset(get_host().get("dataset", "rnnlm")(), out, src)
    assert sorted(p.name for p in written) == [
        "test_data.bin", "train_data.bin", "valid_data.bin", "vocab.txt"
    ]  # fmt: skip
    assert (out / "vocab.txt").read_text().splitlines() == [
        "0 </s> 2 0", "1 b 3 1", "2 a 2 2", "3 c 1 3"  # 100 classes: one word each here
    ]  # fmt: skip
    store = get_host().get("store", "kvfile")()
    store.open(str(out / "test_data.bin"), KREAD)
    words = []
    while (rec := store.read()) is not None:
        words.append(rnnlm_pb2.WordRecord.FromString(rec[1]).word)
    store.close()
    assert words == ["c", "</s>"]  # "q" is unknown
    (src / "valid").unlink()
    with pytest.raises(SingaError, match="lacks valid"):
        prepare_dataset(get_host().get("dataset", "rnnlm")(), out, src)
