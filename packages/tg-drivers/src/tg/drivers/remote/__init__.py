"""Remote PCI: a binary RPC that forwards PCIDevice operations to a server over TCP or a unix socket."""

from tg.drivers.remote.client import RemoteMMIO, RemotePCIDevice, parse_remote, remote_list
from tg.drivers.remote.protocol import DEFAULT_PORT, REQUEST_FMT, RESPONSE_FMT, RemoteCmd
from tg.drivers.remote.server import Limits, RemoteServer, Session, StaticProvider

__all__ = [
    "DEFAULT_PORT",
    "REQUEST_FMT",
    "RESPONSE_FMT",
    "Limits",
    "RemoteCmd",
    "RemoteMMIO",
    "RemotePCIDevice",
    "RemoteServer",
    "Session",
    "StaticProvider",
    "parse_remote",
    "remote_list",
]
