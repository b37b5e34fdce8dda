"""singa-scale-layer: CONTRIBUTING.md's example of a layer with its own configuration."""
