"""Modules and source lines: which nn.Module and which line of the user's code issued each op
(attribute.py, from the trace's Python frames, Call stacks or TorchScript Module Hierarchy; frames.py reads
frame names), and the by-module table with each op row's and finding's module (table.py)."""
