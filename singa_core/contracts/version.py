"""Which core this is, and which plugin API it implements."""

__version__ = "0.1.0"

#: The version of the plugin API (hooks, registries' contracts, Layer/Worker/Updater/...
#: interfaces) this core implements, MAJOR.MINOR: a MINOR release only adds to the API, a
#: MAJOR one may break plugins. A plugin states what it was built for with a module
#: attribute ``SINGA_PLUGIN_API = ">=1,<2"`` or its dependency on ``singa-classic``; one
#: built for another major version is skipped at load (see singa_core.plugin_host.host).
PLUGIN_API_VERSION = "1.5"
#: the distribution plugins depend on
CORE_DISTRIBUTION = "singa-classic"
