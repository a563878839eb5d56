"""The RocketMQ remoting protocol (RIP-18's backward compatibility, DESIGN.md §1).

``codec`` and ``codes`` are sans-I/O and shared with brokers and replicators;
``headers`` names the ext fields of the nameserver's requests and builds REGISTER_BROKER
frames; ``server`` is the asyncio front (one codec per connection, dispatch by code).
"""
