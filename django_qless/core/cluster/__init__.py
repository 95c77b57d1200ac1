"""Redis Cluster: the transport, placement of queues on shards, shard events, queue moves."""
