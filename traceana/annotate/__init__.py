"""The original trace with traceana's verdicts added (`traceana annotate`, `report --annotate`).

verdicts.py: the payload each kernel and op carries; counters.py: the counter tracks per device;
rewrite.py: the streaming pass over the text; write.py: prepare + write; strip.py: the inverse
(the annotated trace's events back to the original's).
"""
