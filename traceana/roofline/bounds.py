"""The bounds an op can have: the roofline stage names them, every later stage and renderer lists them.

The time model (roofline/judge.py) sets compute, memory, latency and underutilised; the copies
(link/copies.py: host_link, peer_link), the collectives (roofline/comm_split.py: communication)
and the cost stage (unmodelled, opaque) the rest. No imports: a renderer that lists the bounds
pays nothing for it.
"""

#: The bounds an op can have, in the order reports list them.
BOUNDS: tuple[str, ...] = ("compute", "memory", "latency", "underutilised", "host_link", "peer_link",
                           "communication", "unmodelled", "opaque")
