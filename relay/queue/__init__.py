"""Work queues: a stream's transactions worked as jobs by a named group (claims, leases,
priorities, not-before times, coalescing by resource, dead letters), decided by the verified
order of the group's control stream so that every replica computes the same assignment."""
