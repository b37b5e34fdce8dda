"""docs/guide/tuning.md, "Results": a study from Python.

Run from a folder holding examples/mnist/job.conf (with its stores) and quick.conf, the
worked example's space file; tests/tuning/test_tune_docs.py runs it.
"""

from singa_core.tuning import create_study, open_study

study = create_study("examples/mnist/job.conf", "quick.conf", "runs/quick2", seed=1)
try:
    result = study.run(trials=4, parallel=2)  # a StudyResult: records, best, best_conf
finally:
    study.close()
# TrialRecord: number, state, params, value, step, seconds, seed, workspace, curve, ...
for t in open_study("runs/quick2").trials():
    print(t.number, t.state, t.params, t.value)
