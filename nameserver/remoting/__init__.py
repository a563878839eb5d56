"""The RocketMQ remoting protocol (RIP-18's backward compatibility: RocketMQ
clients and brokers use the nameserver as they are).

RocketMQ's wire (frames, codes, headers, the frame server) is ``rmq``'s, shared with
brokers and replicators. Here is the nameserver's policy on it: ``codes`` says which request
codes it serves, ``headers`` the bodies of its requests, ``status`` turns its errors into
response codes, and ``server`` wires ``rmq.server`` with those, its metrics and its TLS.
"""
