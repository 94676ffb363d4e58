"""The commands that run torch on this machine (the report path never imports torch).

    record.py, record_capture.py   `traceana record` / `traceana.profile`: run a program under the
                                   profiler, write its trace (and the capture trace), then its report
    calibrate/                     `traceana calibrate`: measure the achievable roofs into a device profile
"""
