"""docs/guide/predict.md, "Predicting and exporting": trained MNIST models from Python.

Run from a folder whose examples/mnist/ holds job.conf and conv.conf trained (their
workspaces' checkpoints); ``x`` are raw MNIST samples ``(N, 784)``, ``images`` the same
digits channels last ``(N, 28, 28, 1)``. tests/inference/test_guide_examples.py runs it.
"""


def predict(x, images):
    from singa_core import Job

    model = Job.from_file("examples/mnist/job.conf").model()  # or .model(checkpoint="...")
    probs = model.predict(x)  # x: (N, 784) raw pixels 0-255 -> (N, 10) probabilities
    classes = model.predict_classes(x)  # (N,); top_k=3 -> (N, 3), best first
    print(model.sample_shape, model.output_shape)  # (784,) (10,)
    print(model.checkpoint)  # .path, .step, .written (seconds), .run (pid, command, ...)
    print(model.checkpoint_notes)  # the note above, when there is one

    lenet = Job.from_file("examples/mnist/conv.conf").model()  # samples (1, 28, 28)
    digits = lenet.predict(images, layout="NHWC")  # (N, 28, 28, 1) images, channels last
    return model, probs, classes, digits
