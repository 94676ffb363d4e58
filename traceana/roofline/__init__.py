"""Roofline stage: each signature's cost set against the device's roofs.

    devices/           the device table (peaks per dtype, DRAM bandwidth, links) and the match from
                       a trace's device name to its row
    device_profile.py  measured (achievable) roofs from `traceana calibrate`, read back
    judge.py           the time model: launch floor + max(FLOPs / peak, bytes / bandwidth), the bound
    comm_split.py      collectives: the link each crosses, its time split into transfer and wait
    bounds.py          the names of the bounds, in report order (every later stage lists them)
"""
