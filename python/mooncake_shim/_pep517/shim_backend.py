"""PEP 517 backend of kvpool-mooncake: the mooncake.store import hook
(kvpool_mooncake.py and kvpool-mooncake.pth) as a pure-Python wheel that
requires kvpool. Installed, the .pth activates the hook at interpreter
start (KVPOOL_MOONCAKE_STORE=0 turns it off); not installed, nothing does.

    pip install --no-build-isolation ./python/mooncake_shim
"""
import os
import sys

# pip puts only this module's own name on its backend path (newer pips).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvp_dist  # noqa: E402

NAME = "kvpool-mooncake"
SUMMARY = "mooncake.store from kvpool: an import hook (kvpool-mooncake.pth) for engines written for Mooncake"
FILES = ("kvpool_mooncake.py", "kvpool-mooncake.pth")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _meta():
    ver = kvp_dist.version(SRC)
    return ver, kvp_dist.metadata(NAME, ver, SUMMARY, ["kvpool==" + ver])


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    ver, meta = _meta()
    return kvp_dist.write_metadata_dir(metadata_directory, NAME, ver, meta)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    ver, meta = _meta()
    files = [(f, os.path.join(SRC, f)) for f in FILES]
    return kvp_dist.write_wheel(wheel_directory, NAME, ver, "py3-none-any", True, files, meta)


def build_sdist(sdist_directory, config_settings=None):
    ver, meta = _meta()
    files = [(f, os.path.join(SRC, f)) for f in FILES + ("pyproject.toml",)]
    files += kvp_dist.walk(SRC, "_pep517")
    return kvp_dist.write_sdist(sdist_directory, NAME, ver, files, [], meta)
