"""The web console against real clusters: pages, the browser, replicator and RocketMQ views
(they wait on conditions and check no timing, so they run beside the other integration tests)."""
