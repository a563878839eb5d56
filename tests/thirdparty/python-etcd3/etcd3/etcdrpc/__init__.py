from .rpc_pb2 import *
from .rpc_pb2_grpc import *
