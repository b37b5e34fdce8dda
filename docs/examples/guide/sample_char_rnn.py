"""docs/guide/predict.md, "The deploy net": char-rnn writes text through its sampling net.

Run from a folder whose examples/char-rnn/ holds the text files and a trained job.conf's
workspace; tests/inference/test_guide_examples.py runs it.
"""

from singa_core import Job

model = Job.from_file("examples/char-rnn/sample.conf").model(batch=1)
vocab = open("examples/char-rnn/vocab.txt").read()
c, text = vocab.index("T"), ""
for _ in range(200):
    c = int(model.predict([c])[0, 0])
    text += vocab[c]
print(text)
