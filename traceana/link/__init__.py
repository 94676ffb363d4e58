"""Link stage: Trace -> Links -> signature groups. Who launched each GPU event, and which events
are one op signature.

    attribute.py       kernel -> launch by correlation, launch -> innermost op by time nesting
    replay/            CUDA/HIP-graph replays meet their capture trace (attach.py; index, graphs,
                       align, inject)
    copies.py          memcpy / memset by direction and the link they cross
    kernel_names/      the kernel-name grammar: library, class, op, dtypes, tensor cores, tile, split-K
    comm_kernels.py    which kernels and ops are communication, however their library names them
    kernel_classes.py  kernel name -> class (GEMM, attention, communication, ...)
    kernel_account.py  every GPU event's time by class x dtype x library (analysis["kernels"])
    steps.py           ProfilerStep windows, phases (forward / backward / optimizer), collectives
                       per step; a rank's facts for the cross-rank view
    signatures.py      op instances -> signature groups: the OpCalls the cost stage prices

Only the loader, the cost formulas' vocabulary (cost.types, cost.dtypes) and the shared helpers
are imported here.
"""
