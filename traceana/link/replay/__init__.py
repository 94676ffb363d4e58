"""Graph replays meet their capture (between linking and grouping; only when the trace replays graphs).

Kernels replayed from a graph link only to the graph launch, so they have no op and no shapes.
The trace recorded while the graph was captured has them.

    index.py    finds the capture files (--capture, or capture_traces/ beside the trace)
    graphs.py   reads each capture into captured graphs: nodes in capture order
    align.py    pairs a launch's replayed events with a captured graph's nodes
    inject.py   appends synthetic op instances and re-links the aligned events to them
    attach.py   `attach(trace, links, capture)`: all of it, and the report's trace.capture entry
"""
