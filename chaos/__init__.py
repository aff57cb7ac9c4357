"""relay's chaos suite: a real cluster, a recorded workload, seeded faults, a checker."""
