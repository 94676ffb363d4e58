"""Differential fuzzing (issue 24): the C scanner and the Python loader (TRACEANA_PURE_PYTHON=1)
give the same answer on every mutant of small real and recorded traces: the same Trace, column
by column (warnings included), and so byte-identical report JSON (checked on a sample: the
analysis is a pure function of the Trace). A BadInput is the same message on both paths.

Mutant classes (a fixed seed; each mutant applies 1-3 of them to a window of a seed trace):
type-preserving value changes, duplicated keys (either copy changed, a huge number in the
first), numbers no double holds (1e400, a 400-digit int, 1e-400), escaped strings (names,
categories, keys), missing fields, and collective (record_param_comms) args variants: missing
"Collective name" / "In msg nelems", the 2021 lower-case "external id", an escaped op name,
mistyped args, two collectives with the same (ts, External id).

    TRACEANA_AGREE_MUTANTS=20000 TRACEANA_AGREE_SEED=7 python -m pytest -q tests/test_loaders_agree.py  # longer
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import os
import random
from pathlib import Path

import pytest

from tests import synth as s
from tests.conftest import SAMPLES, TRACES
from tests.test_scan import _same
from traceana.analysis import analyze_trace
from traceana.errors import BadInput
from traceana.load import reader, stream
from traceana.render.json_out import render_json

pytestmark = pytest.mark.skipif(not stream.available(), reason="the C scanner is not built")

MUTANTS = int(os.environ.get("TRACEANA_AGREE_MUTANTS", "0") or 0) or 2000
SEED = int(os.environ.get("TRACEANA_AGREE_SEED", "24"))
REPORT_EVERY = 8  # every 8th mutant also through analyse + render_json on both paths
WINDOW = 120  # events per mutant at most (keeps a mutant ~1-3 ms to load)


# ------------------------------------------------------------------ writing JSON json.dumps cannot


class Pairs(list):
    """An object written from its (key, value) pairs, so a key may repeat."""


class Tok(str):
    """A token written as it is (a number no double holds)."""


class Esc(str):
    """A string written with every character as a \\uXXXX escape."""


def dump(v) -> str:
    if isinstance(v, Tok):
        return str(v)
    if isinstance(v, Esc):
        return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in v) + '"'
    if isinstance(v, Pairs):
        return "{" + ",".join(dump(k) + ":" + dump(x) for k, x in v) + "}"
    if isinstance(v, dict):
        return "{" + ",".join(dump(k) + ":" + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dump(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


# ------------------------------------------------------------------ seeds


def _collective_seed() -> dict:
    """A data-parallel step as torch >= 2.1 records it: record_param_comms ops with their
    collective args (name, sizes, dtype, group) under the c10d ops that issue them, each
    launching an NCCL kernel."""
    ev, ext, corr, t = [], 1, 1, 0.0
    colls = [("allreduce", 1048576, 1048576, 8, "Float", "[0, 1, 2, 3, 4, 5, 6, 7]", "c10d::allreduce_"),
             ("allgather", 4096, 32768, 8, "BFloat16", "[0, 1, 2, 3, 4, 5, 6, 7]", "c10d::allgather_"),
             ("reduce_scatter", 65536, 8192, 8, "Float", "[0, 1, 2, 3, 4, 5, 6, 7]", "c10d::reduce_scatter_"),
             ("broadcast", 2048, 2048, 4, "Half", "[0, 2, 4, 6]", "c10d::broadcast_")]
    for step in range(3):
        for name, n_in, n_out, group, dtype, ranks, parent in colls:
            ev.append(s.op(parent, t, 60, ext=ext, dims=[[n_in]], types=[dtype]))
            rpc = s.op("record_param_comms", t + 2, 50, ext=ext + 1, dims=[[n_in]], types=[dtype])
            rpc["args"].update({"Collective name": name, "dtype": dtype, "In msg nelems": n_in,
                                "Out msg nelems": n_out, "Group size": group, "Process Group Name": "0",
                                "Process Group Ranks": ranks, "Rank": 0, "Seq": step})
            ev += [rpc, s.launch(t + 5, corr=corr, ext=ext + 1),
                   s.kernel(f"ncclDevKernel_{name.title()}_RING_LL_Sum_float(ncclDevComm*)", t + 20, 200, corr=corr,
                            stream=20)]
            ev += [s.op("aten::mm", t + 70, 10, ext=ext + 2, dims=[[256, 512], [512, 128]]),
                   s.launch(t + 72, corr=corr + 1, ext=ext + 2),
                   s.kernel("ampere_sgemm_64x64_nn", t + 230, 30, corr=corr + 1)]
            ext, corr, t = ext + 3, corr + 2, t + 300
    return s.trace(ev, distributedInfo={"backend": "nccl", "rank": 0, "world_size": 8})


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")


@functools.lru_cache(maxsize=None)
def seeds() -> list[dict]:
    docs = [json.loads(_text(SAMPLES / "t4_seed_pow_mul.json")), json.loads(_text(SAMPLES / "cpu_mlp_train.json.gz")),
            _collective_seed()]
    for rel in ("hta/sampled_rank-0.json.gz", "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                "hta/triton_example.json.gz", "kineto/worker0.1623143089861.pt.trace.json.gz"):
        if (TRACES / rel).exists():
            docs.append(json.loads(_text(TRACES / rel)))
    return docs


# ------------------------------------------------------------------ mutations

HUGE = ["1e400", "-1e400", "1" + "0" * 400, "1e-400", "1.7976931348623159e308", "0.5e309", "-0.0", "1E+308"]
EDGE_INTS = [0, -1, 1, 2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63), 10**20]
EDGE_FLOATS = [0.0, -0.0, 0.5, 1e-300, 1e17, 1e300, 123456789.123456, -1.5]
EDGE_STRS = ["", "x", "aten::mm", "record_param_comms", "cpu_op", "kernel", "12", "-1", "1e400", "\u00e9\u4e2d",
             "\U0001f600", "a\"b\\c", "\n\t", "ProfilerStep#7"]
COMM_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Ranks")


def _events(doc) -> list:
    return doc["traceEvents"]


def _pick(rng: random.Random, events: list, want=None):
    idx = [i for i, e in enumerate(events) if isinstance(e, dict) and (want is None or want(e))]
    return rng.choice(idx) if idx else None


def _same_type(rng: random.Random, v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return rng.choice(EDGE_INTS + [v + 1, v - 1, v * 2])
    if isinstance(v, float):
        return rng.choice(EDGE_FLOATS + [v * 1.5, v + 0.25])
    if isinstance(v, str):
        return rng.choice(EDGE_STRS + [v + "_x", v[::-1]])
    if isinstance(v, list):
        return [_same_type(rng, x) for x in v]
    return v


def m_value(rng, events, sp):
    """Type-preserving: one field of an event (or of its args) gets another value of its type."""
    i = _pick(rng, events)
    if i is None:
        return
    ev = events[i]
    target = ev["args"] if isinstance(ev.get("args"), dict) and ev["args"] and rng.random() < 0.6 else ev
    key = rng.choice(list(target))
    target[key] = _same_type(rng, target[key])


def m_duplicate(rng, events, sp):
    """A key written twice (json.loads keeps the last; so must both loaders), either copy changed,
    sometimes to a number no double holds."""
    i = _pick(rng, events)
    if i is None:
        return
    ev = events[i]
    target_args = isinstance(ev.get("args"), dict) and ev["args"] and rng.random() < 0.5
    obj = ev["args"] if target_args else ev
    key = rng.choice(list(obj))
    other = sp(Tok(rng.choice(HUGE))) if rng.random() < 0.3 else _same_type(rng, obj[key])
    pairs = list(obj.items())
    pairs.insert(rng.randrange(len(pairs) + 1), (key, other))
    if rng.random() < 0.5:  # the changed copy first or last
        pairs = [p for p in pairs if not (p[0] == key and p[1] is obj[key])] + [(key, obj[key])]
    new = sp(Pairs(pairs))
    if target_args:
        ev["args"] = new
    else:
        events[i] = new


def m_huge(rng, events, sp):
    """A number no double holds (or a denormal), in a field the loaders read or one they skip."""
    i = _pick(rng, events)
    if i is None:
        return
    ev = events[i]
    tok = sp(Tok(rng.choice(HUGE)))
    r = rng.random()
    if r < 0.4:
        ev[rng.choice(["ts", "dur", "pid", "tid", "unread"])] = tok
    elif isinstance(ev.get("args"), dict):
        ev["args"][rng.choice(["External id", "correlation", "bytes", "device", "stream", "grid", "Group size",
                               "In msg nelems", "Sequence number", "kernel_flop", "unread"])] = tok


def m_escape(rng, events, sp):
    """A string written with escapes: a name, a category, a key, an arg."""
    i = _pick(rng, events)
    if i is None:
        return
    ev = events[i]
    r = rng.random()
    if r < 0.4 and isinstance(ev.get("name"), str):
        ev["name"] = sp(Esc(ev["name"]))
    elif r < 0.6 and isinstance(ev.get("cat"), str):
        ev["cat"] = sp(Esc(ev["cat"]))
    elif r < 0.8:
        key = rng.choice(list(ev))
        events[i] = sp(Pairs((Esc(k) if k == key else k, v) for k, v in ev.items()))
    elif isinstance(ev.get("args"), dict) and ev["args"]:
        key = rng.choice(list(ev["args"]))
        if isinstance(ev["args"][key], str):
            ev["args"][key] = sp(Esc(ev["args"][key]))


def m_missing(rng, events, sp):
    """A field deleted from an event or its args."""
    i = _pick(rng, events)
    if i is None:
        return
    ev = events[i]
    target = ev["args"] if isinstance(ev.get("args"), dict) and ev["args"] and rng.random() < 0.5 else ev
    del target[rng.choice(list(target))]


def m_collective(rng, events, sp):
    """record_param_comms variants: args missing, the 2021 spelling, an escaped name, mistyped
    args, another collective at the same (ts, External id)."""
    i = _pick(rng, events, lambda e: e.get("name") == "record_param_comms")
    if i is None:
        return
    ev = events[i]
    a = ev.get("args")
    if not isinstance(a, dict):  # (absent, or already mutated into something dump() writes)
        a = ev["args"] = {}
    kind = rng.randrange(7)
    if kind == 0:
        for k in rng.sample(COMM_KEYS, rng.randint(1, 3)):
            a.pop(k, None)
    elif kind == 1 and "External id" in a:
        a["external id"] = a.pop("External id")
    elif kind == 2:
        ev["name"] = sp(Esc("record_param_comms") if rng.random() < 0.5 else Tok('"record_param\\u005fcomms"'))
    elif kind == 3:
        a[rng.choice(COMM_KEYS)] = rng.choice([5, "8", 8.0, 8.5, [0, 1], None, True, -3, 2**62, "", {"a": 1}])
    elif kind == 4:  # a second collective at the same ts and External id, other args
        twin = copy.deepcopy(ev)
        twin["args"]["Collective name"] = rng.choice(["allgather", "broadcast", "all_to_all"])
        twin["args"]["Group size"] = rng.choice([2, 4, 128])
        twin["args"]["In msg nelems"] = rng.choice([1, 3, 1 << 30])
        events.insert(i + 1, twin)
    elif kind == 5:
        a["Process Group Ranks"] = rng.choice([list(range(16)), "[0, 1]", "[]", "0,1,2", 7])
    else:
        ev["args"] = sp(Pairs([*a.items(), ("Collective name", rng.choice(["allreduce", "recv", "send"]))]))


MUTATIONS = (m_value, m_duplicate, m_huge, m_escape, m_missing, m_collective)


@functools.lru_cache(maxsize=None)
def _comm_at(k: int) -> list[int]:
    return [i for i, e in enumerate(_events(seeds()[k])) if isinstance(e, dict) and e.get("name") == "record_param_comms"]


def mutant(rng: random.Random) -> str:
    k = rng.randrange(len(seeds()))
    seed = seeds()[k]
    events = _events(seed)
    comm = _comm_at(k)
    start = 0
    if len(events) > WINDOW:  # a window, around a collective half the time
        at = rng.choice(comm) if comm and rng.random() < 0.5 else rng.randrange(len(events))
        start = max(0, min(at - WINDOW // 2, len(events) - WINDOW))
    doc = json.loads(json.dumps({**seed, "traceEvents": events[start:start + WINDOW]}))  # a deep copy, fast
    events = doc["traceEvents"]
    comm = [i - start for i in comm if start <= i < start + WINDOW]
    specials: dict[str, object] = {}

    def sp(obj):
        """A placeholder string for a value json.dumps cannot write, written by dump() at the end
        (dump() of the whole document is ~10x slower than json.dumps)."""
        key = f"\x00special{len(specials)}\x00"
        specials[key] = obj
        return key

    for _ in range(rng.randint(1, 3)):
        f = m_collective if comm and rng.random() < 0.25 else rng.choice(MUTATIONS)
        f(rng, events, sp)
    text = json.dumps(doc, ensure_ascii=False)
    for key in reversed(specials):  # later specials may hold earlier ones: those are substituted after
        text = text.replace(json.dumps(key, ensure_ascii=False), dump(specials[key]))
    return text


# ------------------------------------------------------------------ the property


def _load(path: str, pure: bool, monkeypatch):
    with monkeypatch.context() as m:
        if pure:
            m.setenv("TRACEANA_PURE_PYTHON", "1")
        else:
            m.delenv("TRACEANA_PURE_PYTHON", raising=False)
        try:
            return reader.load_trace(path)
        except BadInput as exc:
            return str(exc)


def test_the_two_loaders_agree_on_every_mutant(tmp_path, monkeypatch):
    rng = random.Random(SEED)
    path = str(tmp_path / "mutant.json")
    outcomes = {"same trace": 0, "same refusal": 0, "same report": 0, "collective args": 0}
    for n in range(MUTANTS):
        text = mutant(rng)
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(text)
        c, py = _load(path, False, monkeypatch), _load(path, True, monkeypatch)
        try:
            if isinstance(c, str) or isinstance(py, str):
                assert c == py
                outcomes["same refusal"] += 1
                continue
            _same(c, py, "trace")
            outcomes["same trace"] += 1
            outcomes["collective args"] += any("collective" in dict(x) for x in c.ops.extra.values())
            if n % REPORT_EVERY == 0:
                assert render_json(analyze_trace(c)) == render_json(analyze_trace(py))
                outcomes["same report"] += 1
        except AssertionError:
            keep = Path(os.environ.get("TRACEANA_FUZZ_FAILURES", tmp_path)) / f"disagree_{n}.json"
            keep.parent.mkdir(parents=True, exist_ok=True)
            keep.write_text(text, encoding="utf-8", errors="surrogatepass")
            raise AssertionError(f"mutant {n}: the loaders disagree (kept as {keep})") from None
    # every class ran: most mutants load, some are refused, many carry collective args
    assert outcomes["same trace"] + outcomes["same refusal"] == MUTANTS
    assert outcomes["same trace"] > MUTANTS // 2 and outcomes["same report"] >= MUTANTS // (2 * REPORT_EVERY)
    assert outcomes["collective args"] > MUTANTS // 20, outcomes


def test_collective_args_are_read_the_same_way_on_both_paths(tmp_path, monkeypatch):
    """The cases the issue names, one by one: an escaped op name, a missing "Collective name" /
    "In msg nelems", the 2021 "external id", two collectives at the same (ts, External id), and a
    mistyped field elsewhere in the file (the lenient path): each collective keeps its own args
    (before: the chunked Python path matched args by byte search + (ts, External id), the
    lenient path read none)."""
    doc = _collective_seed()
    events = _events(doc)
    rpc = [i for i, e in enumerate(events) if e["name"] == "record_param_comms"]
    events[rpc[0]]["name"] = Esc("record_param_comms")
    del events[rpc[1]]["args"]["Collective name"]
    del events[rpc[2]]["args"]["In msg nelems"]
    events[rpc[3]]["args"]["external id"] = events[rpc[3]]["args"].pop("External id")
    twin = copy.deepcopy(events[rpc[4]])
    twin["args"].update({"Collective name": "broadcast", "Group size": 128, "In msg nelems": 7})
    events.insert(rpc[4] + 1, twin)
    for lenient in (False, True):
        if lenient:
            events[0]["pid"] = [1]  # a mistyped field anywhere: the Python path reads leniently
        p = tmp_path / f"coll_{lenient}.json"
        p.write_text(dump(doc))
        c, py = _load(str(p), False, monkeypatch), _load(str(p), True, monkeypatch)
        _same(c, py, "trace")
        names = [c.names[k] for k in c.ops.name]
        rows = [i for i, n in enumerate(names) if n == "record_param_comms"]
        got = [dict(py.ops.extra.get(i, ())) for i in rows]
        assert got[0]["collective"] == "allreduce" and got[0]["in_nelems"] == 1048576  # escaped name
        assert "collective" not in got[1] and got[1]["group_size"] == 8  # no "Collective name"
        assert "in_nelems" not in got[2] and got[2]["out_nelems"] == 8192  # reduce_scatter's output
        assert got[3]["collective"] == "broadcast" and got[3]["group_ranks_n"] == 4  # "external id" (2021)
        # the two at the same (ts, External id): each its own args, 1048576 vs 7 elements, 8 vs 128 ranks
        assert (got[4]["in_nelems"], got[4]["group_size"]) == (1048576, 8)
        assert (got[5]["in_nelems"], got[5]["group_size"], got[5]["collective"]) == (7, 128, "broadcast")


def test_collective_ids_and_the_host_are_read_the_same_way_on_both_paths(tmp_path, monkeypatch):
    """What the cross-rank matching keys on (ranks/match.py): a record_param_comms' "Seq", "Process Group
    Name", all_to_all split sizes and p2p peers (ops.comm_ids, apart from the signature's extra args), and
    the trace's host_name — the same from the C scanner and the Python loader, the lenient path too."""
    doc = _collective_seed()
    doc["host_name"] = "node-3"
    events = _events(doc)
    rpc = [i for i, e in enumerate(events) if e["name"] == "record_param_comms"]
    events[rpc[0]]["args"].update({"In split size": "[1, 2, 3, 4]", "Out split size": "[4, 3, 2, 1]"})
    events[rpc[1]]["args"].update({"Collective name": "send", "Dst Rank": 5, "Seq": "x"})  # a seq not a number
    for lenient in (False, True):
        if lenient:
            events[0]["pid"] = [1]
        p = tmp_path / f"ids_{lenient}.json"
        p.write_text(dump(doc))
        c, py = _load(str(p), False, monkeypatch), _load(str(p), True, monkeypatch)
        _same(c, py, "trace")
        assert c.host == "node-3"
        rows = [i for i, k in enumerate(c.ops.name.tolist()) if c.names[k] == "record_param_comms"]
        ids = [dict(c.ops.comm_ids.get(i, ())) for i in rows]
        assert ids[0] == {"seq": 0, "pg": "0", "in_split": (1, 2, 3, 4), "out_split": (4, 3, 2, 1)}
        assert ids[1] == {"pg": "0", "dst": 5}
        assert [d.get("seq") for d in ids[4:8]] == [1, 1, 1, 1]  # the second step's four collectives
        # the ids never split a signature: every step's allreduce is one op row
        assert "seq" not in dict(c.ops.extra.get(rows[0], ()))
