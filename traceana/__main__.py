from traceana.cli import run

run()
