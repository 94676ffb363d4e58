"""The files traceana writes: how each is written, whose it is, what it is called.

    safe_write.py  a temporary file renamed into place (no half file, no link followed); write_text /
                   write_bytes, the one way every command writes
    ownership.py   the marker each format carries, so a later run may replace only its own files
    names.py       the report's name when -o is not given
"""
