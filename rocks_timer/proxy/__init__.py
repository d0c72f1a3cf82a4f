"""The RocketMQ 5 gRPC front (FRONTS.md): ``apache.rocketmq.v2.MessagingService`` over a Broker,
so the official RocketMQ clients send, delay, recall, receive and ack against rocks-timer.

No engine imports this package; it needs the ``grpc`` extra (grpcio, protobuf and the protocol
stubs of rocketmq-python-client).
"""
from rocks_timer.proxy.server import DEFAULT_LISTEN, GrpcFront, parse_listen

__all__ = ["DEFAULT_LISTEN", "GrpcFront", "parse_listen"]
