"""Many ranks of one run: every rank file analysed (the whole pipeline each), then compared.

    executor.py     finds the rank files, sizes the worker processes (or a Dask cluster), runs
                    the per-rank analysis and its facts on them (sizing.py: memory per file)
    calls.py        (in the worker) one rank's collective calls: arrival, end, group, seq, peer, sizes
    windows.py      (in the worker) what the rank did in the interval before each arrival
    summary.py      (in the worker) the two as numpy columns: all the cross-rank pass reads of a rank
    match.py        the calls matched across ranks (seq / order / p2p / time), clock offsets, mismatches
    waits.py        per matched collective: the last arrival, each rank's wait, who caused it and why
    collectives.py  the document's "collectives" section from the two above
    first.py        the run's first screen: who made everyone wait and why, step starts, imbalance
    cross_rank.py   the per-rank analyses in, one comparison out (the traceana.ranks/1 document)
    straggler.py    which rank has the longest own time, where its extra time goes, per phase
"""
