"""Documents judged after the analysis: two runs compared, and the CI gates.

    runs.py   `diff_analyses(base, head)`: op signature by op signature (the traceana.diff/1 document)
    gates.py  `--fail-on` specs parsed and evaluated against an analysis or a comparison

(The API's `traceana.diff` is traceana/api.py; no module here is named after it, so importing
one never shadows it.)
"""
