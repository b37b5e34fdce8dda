from singa_core.testing import blobs_csv, check_updater, check_worker, mlp_job


def test_signum_passes_the_kit():
    check_updater("kFooUpdater", "[singa_foo.foo_updater_conf] { beta: 0.9 }")


def test_foo_worker_passes_the_kit(tmp_path):
    # the kit asks one gradient per Param per step: kFooAlg's `repeat` is 1 here
    alg = 'alg: kUserAlg user_alg: "kFooAlg"'
    stub = check_worker(mlp_job(blobs_csv(tmp_path / "d.csv"), alg=alg), steps=3)
    assert sum(e[0] == "update" for e in stub.events) == 3 * 4  # stub.events: the call order
