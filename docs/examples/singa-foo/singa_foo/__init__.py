"""singa-foo: CONTRIBUTING.md's worker, updater, LR change and param generator."""
