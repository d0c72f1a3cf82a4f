"""The ``apache.rocketmq.v2`` protocol stubs: the very modules the official Python client ships.

Two differently generated copies of ``apache.rocketmq.v2`` cannot live in one process (protobuf's
descriptor pool refuses the second), so the server uses the client's own ``rocketmq.grpc_protocol``
modules. Importing them the ordinary way would run ``rocketmq/__init__.py``, which loads the
whole client, opentelemetry, and creates ``~/logs/rocketmq_python`` as a side effect; a broker
should not. So, when the client is not already imported, the three generated modules are loaded
from the installed package under their own names with a temporary stand-in for the two parent
packages, which is removed again: a later ``import rocketmq`` (a client in the same process)
finds the generated modules already in ``sys.modules`` and reuses them, so exactly one copy is
ever registered.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from rocks_timer.errors import EngineNotAvailableError

_PARENT = "rocketmq"
_PACKAGE = "rocketmq.grpc_protocol"


def _load():
    if _PACKAGE in sys.modules:  # the client is imported already: share its modules
        return (importlib.import_module(f"{_PACKAGE}.definition_pb2"),
                importlib.import_module(f"{_PACKAGE}.service_pb2"),
                importlib.import_module(f"{_PACKAGE}.service_pb2_grpc"))
    spec = importlib.util.find_spec(_PARENT)
    if spec is None or not spec.submodule_search_locations:
        raise EngineNotAvailableError(
            "the gRPC front needs the protocol stubs of rocketmq-python-client==5.1.2 "
            "(pip install 'rocks-timer[grpc]')")
    root = list(spec.submodule_search_locations)[0]
    parent, package = types.ModuleType(_PARENT), types.ModuleType(_PACKAGE)
    parent.__path__ = [root]
    package.__path__ = [f"{root}/grpc_protocol"]
    parent.grpc_protocol = package  # type: ignore[attr-defined]
    sys.modules[_PARENT], sys.modules[_PACKAGE] = parent, package
    try:
        return (importlib.import_module(f"{_PACKAGE}.definition_pb2"),
                importlib.import_module(f"{_PACKAGE}.service_pb2"),
                importlib.import_module(f"{_PACKAGE}.service_pb2_grpc"))
    finally:
        for name, stand_in in ((_PACKAGE, package), (_PARENT, parent)):
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


try:
    import grpc  # noqa: F401 - checked here so the error names the extra to install
except ImportError as exc:  # pragma: no cover - the grpc extra is not installed
    raise EngineNotAvailableError(f"the gRPC front needs grpcio ({exc}); pip install "
                                  "'rocks-timer[grpc]'") from None

definition_pb2, service_pb2, service_pb2_grpc = _load()
Code = definition_pb2.Code
pb = definition_pb2
svc = service_pb2

__all__ = ["Code", "definition_pb2", "pb", "service_pb2", "service_pb2_grpc", "svc"]
