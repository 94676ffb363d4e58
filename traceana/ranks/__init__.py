"""Many ranks of one run: every rank file analysed (the whole pipeline each), then compared.

    executor.py    finds the rank files, sizes the worker processes (or a Dask cluster), runs
                   the per-rank analysis and its facts (link/steps.py) on them
    cross_rank.py  the per-rank analyses in, one comparison out (the traceana.ranks/1 document)
    straggler.py   which rank the others wait for, where its extra time goes, per phase
"""
