"""docs/guide/predict.md, "ONNX": char-rnn's sampling net exported to ONNX, run in
onnxruntime with its GRU state fed back.

Run where ``singa export examples/char-rnn/sample.conf --out sample.onnx`` wrote
sample.onnx; tests/inference/test_guide_examples.py runs it.
"""

import numpy as np
import onnxruntime as ort

session = ort.InferenceSession("sample.onnx")
c, state = np.array([17], np.float32), np.zeros((1, 512), np.float32)  # 512: dim_hidden
for _ in range(100):
    c, state = session.run(["output", "gru1/state_out"], {"input": c, "gru1/state": state})
    c = c[:, 0]  # the most likely next character, the next call's input
print(int(c[0]))
