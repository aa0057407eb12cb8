"""kvpool_mooncake: `mooncake.store` from kvpool, the rest of Mooncake from
Mooncake.

An import hook (a sys.meta_path finder) that answers only for
mooncake.store and the pure-Python store helpers engines import next to it
(mooncake.mooncake_config, mooncake.async_store): they are kvpool's
modules. Every other name, `mooncake` itself included, goes to the normal
import machinery, so an installed Mooncake wheel still provides
mooncake.engine (the Transfer Engine, PD disaggregation) and the rest of its
package. Without a Mooncake installation an empty `mooncake` package stands
in, so `from mooncake.store import MooncakeDistributedStore` still works.

Turned on at interpreter start by kvpool-mooncake.pth, which
`make install-mooncake-shim` puts next to kvpool in site-packages;
KVPOOL_MOONCAKE_STORE=0 turns it off for one process. Without the .pth:
`import kvpool_mooncake; kvpool_mooncake.activate()` before the first
`import mooncake.store`. This module imports nothing of kvpool until
mooncake.store is imported.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

REDIRECTS = {
    "mooncake.store": "kvpool.mooncake_store",
    "mooncake.mooncake_config": "kvpool.mooncake_config",
    "mooncake.async_store": "kvpool.async_store",
}


class _Alias(importlib.abc.Loader):
    """Loads a name as another module: sys.modules gets the same object."""

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass


class _EmptyPackage(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__doc__ = ("Stand-in for Mooncake's package (kvpool_mooncake): only "
                          "mooncake.store and its helpers, from kvpool.")


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in REDIRECTS:
            return importlib.util.spec_from_loader(name, _Alias(REDIRECTS[name]))
        if name != "mooncake":
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            if f.find_spec(name, path, target) is not None:
                return None     # a real Mooncake: the normal machinery loads it
        spec = importlib.machinery.ModuleSpec(name, _EmptyPackage(), is_package=True)
        spec.submodule_search_locations = []
        return spec


_finder = Finder()


def activate():
    """Installs the hook (first on sys.meta_path). A mooncake.store imported
    before this stays what it was."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def deactivate():
    while _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def active():
    return _finder in sys.meta_path


def activate_from_env():
    """What the .pth does: activate() unless KVPOOL_MOONCAKE_STORE says no."""
    if os.environ.get("KVPOOL_MOONCAKE_STORE", "1").strip().lower() not in (
            "0", "false", "no", "off"):
        activate()
