"""The trace's tracks: which process and thread each event's track stands for (the JSON event's
`pid` / `tid`), and whether it is a GPU stream.

A thread track (ThreadDescriptor) is (pid, tid); a process track (ProcessDescriptor) is (pid, 0); a
named track is a thread of its parent's process named by its own name (a child of a named root,
(root name, name)); a track no descriptor names is ("?", uuid). When a uuid is described twice
(writers repeat descriptors when their incremental state is cleared) the last description counts.

A track is a GPU stream when its own name says "stream N" (how Kineto and torch.profiler name a CUDA
or HIP stream's row) or its process is labelled or named as a GPU ("GPU 0").
"""

from __future__ import annotations

import re

import numpy as np

from traceana.load.decode import _as_int
from traceana.load.pftrace.descriptors import COUNTER_TRACK, PROCESS, THREAD

_STREAM = re.compile(r"\s*stream\b", re.I)
_GPU = re.compile(r"\bGPU\b")


class Tracks:
    def __init__(self, t: dict, strings: list[str]) -> None:
        uuid = t["tr_uuid"]
        n = len(uuid)
        # the last descriptor of each uuid
        last = n - 1 - np.unique(uuid[::-1], return_index=True)[1] if n else np.zeros(0, np.int64)
        last = np.sort(last)
        self.uuids = uuid[last]
        info = {}
        for j in last.tolist():
            name = int(t["tr_name"][j])
            labels = int(t["tr_labels"][j])
            info[int(uuid[j])] = (int(t["tr_kind"][j]), int(t["tr_parent"][j]), int(t["tr_pid"][j]),
                                  int(t["tr_tid"][j]), strings[name] if name >= 0 else "",
                                  strings[labels] if labels >= 0 else "")
        self.info = info
        order = np.argsort(self.uuids, kind="stable")
        self._sorted = self.uuids[order]
        self._order = order
        keys, gpu, has_pid = [], [], []
        for u in self.uuids.tolist():
            k, g, p = self._describe(u)
            keys.append(k)
            gpu.append(g)
            has_pid.append(p)
        # one more entry: the tracks no descriptor names (filled per uuid in index())
        self._keys = keys
        self._gpu = gpu
        self._has_pid = has_pid
        self.thread_keys: list[tuple] = []
        self._key_index: dict[tuple, int] = {}

    def _process(self, u: int, depth: int = 0):
        """(pid or None, name, labels) of the process a track belongs to."""
        i = self.info.get(u)
        if i is None or depth > 32:
            return None, "", ""
        kind, parent, pid, tid, name, labels = i
        if kind == PROCESS:
            return pid, name, labels
        if kind == THREAD:
            p = self._process(parent, depth + 1) if parent else (None, "", "")
            return pid, p[1], p[2]
        return self._process(parent, depth + 1) if parent else (None, "", "")

    def _describe(self, u: int) -> tuple[tuple, bool, bool]:
        kind, parent, pid, tid, name, labels = self.info[u]
        ppid, pname, plabels = self._process(parent) if parent else (None, "", "")
        if kind == THREAD:
            key = (pid, tid)
            ppid = pid
        elif kind == PROCESS:
            key = (pid, 0)
            ppid, pname, plabels = pid, name, labels
        else:  # a named track (or a counter's): a thread of its parent's process
            if ppid is not None:
                key = (ppid, name)
            elif parent and parent in self.info:
                key = (self.info[parent][4], name)
            else:
                key = (name, "")
        gpu = kind != COUNTER_TRACK and bool(
            (kind != PROCESS and _STREAM.match(name)) or _GPU.search(plabels) or _GPU.search(pname))
        return key, gpu, ppid is not None and ppid >= 0 and kind != COUNTER_TRACK

    def track_name(self, uuid: int) -> str:
        i = self.info.get(uuid)
        return i[4] if i is not None else ""

    def names(self) -> dict[tuple, str]:
        """{(pid, None): process name, (pid, tid): thread name} of the described processes and threads."""
        out: dict[tuple, str] = {}
        for kind, parent, pid, tid, name, labels in self.info.values():
            if name and kind == PROCESS:
                out[(pid, None)] = name
            elif name and kind == THREAD:
                out[(pid, tid)] = name
        return out

    def index(self, track_uuids: np.ndarray) -> np.ndarray:
        """Per event, the index of its track in thread_key / gpu / has_pid / pid_int / tid_int (tracks
        no descriptor names get one entry each)."""
        pos = np.searchsorted(self._sorted, track_uuids)
        pos_c = np.minimum(pos, max(len(self._sorted) - 1, 0))
        known = (pos < len(self._sorted)) & (self._sorted[pos_c] == track_uuids) if len(self._sorted) else \
            np.zeros(len(track_uuids), bool)
        idx = np.full(len(track_uuids), -1, np.int64)
        idx[known] = self._order[pos_c[known]]
        keys, gpu, has_pid = list(self._keys), list(self._gpu), list(self._has_pid)
        if not known.all():
            unknown, inv = np.unique(track_uuids[~known], return_inverse=True)
            base = len(keys)
            for u in unknown.tolist():
                keys.append(("?", u))
                gpu.append(False)
                has_pid.append(False)
            idx[~known] = base + inv
        self.gpu = np.array(gpu, bool)
        self.has_pid = np.array(has_pid, bool)
        codes = []
        for k in keys:
            c = self._key_index.get(k)
            if c is None:
                c = self._key_index[k] = len(self.thread_keys)
                self.thread_keys.append(k)
            codes.append(c)
        self.thread_key = np.array(codes, np.int64)
        self.pid_int = np.array([_as_int(k[0]) for k in keys], np.int64)
        self.tid_int = np.array([_as_int(k[1]) for k in keys], np.int64)
        return idx
