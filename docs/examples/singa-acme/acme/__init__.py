"""singa-acme: the layers and updater CONTRIBUTING.md's examples show in part."""
