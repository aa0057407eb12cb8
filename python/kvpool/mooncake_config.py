"""MooncakeConfig: the configuration helper engines import as
`mooncake.mooncake_config`, with Mooncake's fields, defaults, parsing and
errors — from_file() reads the deployment JSON, load_from_env() the
MOONCAKE_CONFIG_PATH file or the MOONCAKE_* variables. kvpool adds one field,
cluster_token_file (JSON "cluster_token_file", MOONCAKE_CLUSTER_TOKEN_FILE),
the token file of a pool that requires one; setup_args() gives what to pass
to MooncakeDistributedStore.setup().
"""
import json
import logging
import os
from dataclasses import dataclass
from typing import Optional

logger = logging.getLogger(__name__)

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB, as Mooncake
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}

KNOWN_PROTOCOLS = frozenset({"tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra",
                             "hip", "barex", "cxl", "ascend", "ub", "ubshmem", "maca",
                             "sunrise_link", "rpc_only"})
_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")


def _parse_segment_size(value) -> int:
    """Bytes from an int or a str such as "4gb", "16 MB", "1.5G", "1024"."""
    if isinstance(value, bool):
        raise ValueError("Invalid segment size: %r" % (value,))
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return int(value)
    s = value.strip().lower()
    if not s:
        raise ValueError("Invalid segment size: empty string")
    i = len(s)
    while i and s[i - 1].isalpha():
        i -= 1
    num, unit = s[:i].strip(), s[i:]
    if unit not in _UNITS:
        raise ValueError("Invalid segment size: unknown unit %r" % unit)
    if not num:
        raise ValueError("Invalid segment size: missing number before %r" % unit)
    return int(float(num) * _UNITS[unit])


def _parse_bool(value) -> bool:
    """A bool from a bool, a number, or text (true/false, 1/0, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    s = str(value).strip().lower()
    if s in ("", "false", "0", "no", "off", "disable"):
        return False
    if s in ("true", "1", "yes", "on", "enable"):
        return True
    raise ValueError("Invalid boolean value: %r" % (value,))


@dataclass
class MooncakeConfig:
    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = 9300
    cluster_token_file: str = ""

    def __post_init__(self):
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError("Invalid protocol: %r. Protocol must be a non-empty string, e.g. "
                             "'tcp' or 'rdma'." % (self.protocol,))
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol %r; passing it through unchanged. Known "
                           "protocols are: %s.", self.protocol,
                           ", ".join(sorted(KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            if getattr(self, name) < 0:
                raise ValueError("Invalid %s: %d. Size must be non-negative."
                                 % (name, getattr(self, name)))
        for name in _REQUIRED:
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError("Config field %r must be a non-empty string, got %r."
                                 % (name, v))

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        with open(file_path) as f:
            c = json.load(f)
        for name in _REQUIRED:
            if name not in c:
                raise ValueError("Missing required config field: %s" % name)
        return MooncakeConfig(
            local_hostname=c.get("local_hostname"),
            metadata_server=c.get("metadata_server"),
            global_segment_size=_parse_segment_size(
                c.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                c.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=c.get("protocol", "tcp"),
            device_name=c.get("device_name", ""),
            master_server_address=c.get("master_server_address"),
            enable_ssd_offload=_parse_bool(c.get("enable_ssd_offload", False)),
            ssd_offload_path="" if c.get("ssd_offload_path") is None
            else str(c.get("ssd_offload_path")),
            tenant_id="default" if c.get("tenant_id") is None else str(c.get("tenant_id")),
            enable_client_http_server=_parse_bool(c.get("enable_client_http_server", False)),
            client_http_port=int(c.get("client_http_port", 9300)),
            cluster_token_file=str(c.get("cluster_token_file") or ""))

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """MOONCAKE_CONFIG_PATH's file, else MOONCAKE_MASTER and the other
        MOONCAKE_* variables."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                             "'MOONCAKE_MASTER' is set.")
        env = os.getenv
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_parse_segment_size(
                env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE)),
            local_buffer_size=_parse_segment_size(
                env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE)),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=env("MOONCAKE_MASTER"),
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false")),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(
                env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false")),
            client_http_port=int(env("MOONCAKE_CLIENT_HTTP_PORT", 9300)),
            cluster_token_file=env("MOONCAKE_CLUSTER_TOKEN_FILE", ""))

    def setup_args(self) -> dict:
        """The dict to pass to MooncakeDistributedStore.setup()."""
        d = {"local_hostname": self.local_hostname, "metadata_server": self.metadata_server,
             "global_segment_size": self.global_segment_size,
             "local_buffer_size": self.local_buffer_size, "protocol": self.protocol,
             "rdma_devices": self.device_name or "",
             "master_server_addr": self.master_server_address,
             "enable_ssd_offload": self.enable_ssd_offload,
             "ssd_offload_path": self.ssd_offload_path, "tenant_id": self.tenant_id,
             "enable_client_http_server": self.enable_client_http_server,
             "client_http_port": self.client_http_port}
        if self.cluster_token_file:
            d["cluster_token_file"] = self.cluster_token_file
        return d
