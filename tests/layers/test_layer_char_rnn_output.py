"""kCharRNNOutput: prints vocab[index] of each row's first column."""

import numpy as np
import pytest
from singa_builtins.layers.char_rnn_output import CharRNNOutputLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest
from singa_core.testing import GradCase, SourceLayer, build


def output(tmp_path, src):
    (tmp_path / "v.txt").write_text("\nab", newline="")
    conf = f'name: "out" char_rnn_conf {{ vocab_path: "{tmp_path / "v.txt"}" }}'
    return build(CharRNNOutputLayer, conf, [src])


def test_prints_each_rows_character(tmp_path, capsys):
    src = SourceLayer([[2.0, 1.0], [1.0, 0.0]])  # (B, topk): the first column counts
    layer = output(tmp_path, src)
    layer.forward(kTest | kForward, [src])
    src.data[:, 0] = [0.0, 2.0]
    layer.forward(kTest | kForward, [src])
    layer.close()
    assert capsys.readouterr().out == "ba\nb\n"  # close ends the line
    assert layer.text == ["ba", "\nb"]
    layer.close()  # nothing pending: prints nothing
    assert capsys.readouterr().out == ""


def test_index_outside_the_vocabulary(tmp_path):
    src = SourceLayer([[3.0]])
    layer = output(tmp_path, src)
    with pytest.raises(SingaError, match="index 3 .* vocabulary of 3"):
        layer.forward(kTest | kForward, [src])


def _case(tmp_path):
    src = SourceLayer(np.array([[1.0], [2.0]]))
    return GradCase(output(tmp_path, src), [src], no_gradient="an output layer")


GRADIENT_CASES = {"kCharRNNOutput": _case}
