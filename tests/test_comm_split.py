"""Communication that explains itself: which kernels and ops are communication (comm_kernels.py),
every collective a communication row with its link, its time split into transfer and wait
(comm_split.py). Worked numbers with their arithmetic."""

from __future__ import annotations

import json

import pytest

from tests import synth as s
from tests.analyses import analysis
from traceana.analysis import analyze
from traceana.link.comm_kernels import comm_name_mask, is_comm_op, kernel_library
from traceana.roofline.comm_split import finish, placement
from traceana.link.kernel_classes import classify

# Kernel names as the libraries' sources declare them (the profiler shows them demangled):
# DeepEP csrc/kernels/intranode.cu / internode.cu / internode_ll.cu, its v2 JIT kernels
# (deep_ep::ep::dispatch_impl), the dpsk::ep spelling; pplx-kernels csrc/all_to_all/*.cu;
# vLLM / SGLang custom_all_reduce.cuh; aiter / vLLM quick_all_reduce; MSCCL++ executor and apps/nccl;
# NVSHMEM; torch symmetric memory (CUDASymmetricMemoryOps.cu).
COMM = [
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "NCCL"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "NCCL"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int)", "DeepEP"),
    ("void deep_ep::intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int, int)", "DeepEP"),
    ("void deep_ep::internode::dispatch<false, 2, 8>(int4*, float*, int*)", "DeepEP"),
    ("void deep_ep::internode::cached_notify<8>(int, int, int)", "DeepEP"),
    ("void deep_ep::internode_ll::combine<false, 7168, 9>(void*, void*)", "DeepEP"),
    ("void deep_ep::ep::dispatch_impl<true, false, false, 24>(void*, void*)", "DeepEP"),
    ("void dpsk::ep::internode::dispatch<true, 2>(int4*, float*)", "DeepEP"),
    ("void (anonymous namespace)::dispatchKernel<16u, true, true>(int*, unsigned long, std::byte*)", "pplx-kernels"),
    ("void combineKernel<float, __nv_bfloat16, 32ul, true, false>(__nv_bfloat16*, unsigned long)", "pplx-kernels"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)",
     "custom all-reduce"),
    ("void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__half>, __half>(__half const*)",
     "custom all-reduce"),
    ("void mscclpp::executionKernel<__nv_bfloat16, mscclpp::LL16Packet>(int, __nv_bfloat16*)", "MSCCL++"),
    ("nvshmemi_proxy_rma_entrypoint(void*, void*, rma_bytesdesc_t, int)", "NVSHMEM"),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 8>(float*, unsigned long)", "symmetric memory"),
    ("void (anonymous namespace)::one_shot_all_reduce_kernel<float, 16>(float**, float*)", "collective"),
]
NOT_COMM = [
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)",  # routing on this GPU
    "triton_poi_fused_all_gather_into_tensor_0",  # Inductor's copy around a functional collective
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*>>(long*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)",
]


@pytest.mark.parametrize("name,lib", COMM)
def test_communication_kernels_by_library(name, lib):
    assert kernel_library(name) == lib
    assert classify(name) == "communication"  # kernel classes use the same rule


@pytest.mark.parametrize("name", NOT_COMM)
def test_kernels_that_move_nothing_between_gpus(name):
    assert kernel_library(name) is None and classify(name) != "communication"


def test_name_mask_and_comm_ops():
    names = [n for n, _ in COMM[:3]] + NOT_COMM[:2]
    assert comm_name_mask(names).tolist() == [True, True, True, False, False]
    for op in ("record_param_comms", "c10d::allreduce_", "_c10d_functional::all_gather_into_tensor",
               "symm_mem::one_shot_all_reduce", "vllm::all_reduce", "_C_custom_ar::all_reduce",
               "pplx_kernels::all_to_all_internode_dispatch", "sglang::inplace_all_reduce"):
        assert is_comm_op(op), op
    assert not is_comm_op("aten::mm") and not is_comm_op("vllm::unified_attention")


def test_deepep_kernels_outside_any_op_are_communication(tmp_path):
    """DeepEP is called from Python (no aten op): its kernels are launched outside ops, yet their
    rows are communication, size not recorded, and the kernel classes count them as such."""
    ev = [s.launch(10, corr=1, tid=1), s.kernel(COMM[4][0], 100, 40, corr=1),
          s.launch(20, corr=2, tid=1), s.kernel("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*)",
                                               150, 10, corr=2)]
    a = analyze(s.write(tmp_path, s.trace(ev)))
    row = next(r for r in a["ops"] if r["name"].startswith("void deep_ep::internode::dispatch"))
    assert row["bound"] == "communication" and row["comm"]["sized"] is False
    assert row["reason"].startswith("size not recorded") and row["cause"] == "outside_op"
    assert a["kernel_classes"]["by_class"]["communication"] == 40  # the layout kernel is "other"
    layout = next(r for r in a["ops"] if "get_dispatch_layout" in r["name"])
    assert layout["bound"] != "communication"


def test_rank0_collectives_split_into_transfer_and_wait():
    a = analysis("hta/rank0.json.gz")  # A100-SXM4-80GB (NVLink 3: 300 GB/s per direction), 16 ranks, 8 GPUs listed
    rows = [r for r in a["ops"] if r["name"] == "record_param_comms"]
    assert all(r["bound"] == "communication" and r["roof_kind"] == "peer_link" for r in rows)
    # the largest, op1: 10 DDP gradient all-reduces issued by c10d::allreduce_ whose TensorLists have no
    # sizes: a communication row that says so, its cause kept for the coverage table
    op1 = rows[0]
    assert op1["device_time_us"] == pytest.approx(126555.0) and op1["count"] == 10
    assert op1["cause"] == "shapes_not_recorded" and op1["comm"]["sized"] is False
    assert op1["comm"]["algorithm"] == "all_reduce" and op1["comm"]["issued_by"] == "c10d::allreduce_"
    assert op1["comm"]["transfer_us"] is None and op1["reason"].startswith("size not recorded")
    assert a["coverage"]["opaque_by_cause"]["shapes_not_recorded"] >= 126555.0
    # the 90 MiB all_to_all: S = 100,663,296 B, group 16 (the world size, assumed), 15/16 * S = 94,371,840 B
    # per rank; at 300 GB/s = 94,371,840 / 300e3 = 314.5728 µs transfer; 3122 µs / 5 calls = 624.4 µs per
    # call, so 624.4 - 314.5728 = 309.8272 µs wait
    big = next(r for r in rows if r["comm"].get("msg_bytes") == 100663296)
    c = big["comm"]
    assert c["bytes_per_rank"] == 94371840 and c["group_size"] == 16 and c["group_assumed"]
    assert c["transfer_us"] == pytest.approx(314.5728) and c["wait_us"] == pytest.approx(624.4 - 314.5728)
    assert c["link"] == "NVLink 3" and c["link_gbps"] == 300.0
    # 16 ranks do not fit in the 8 GPUs the trace lists, but 16 was only assumed: the link is
    # taken as the peer link (the least the transfer can take), and said so
    assert c["placement"] == "unknown" and c["link_assumed"] and "not recorded" in c["placement_why"]
    # all 15 sized record_param_comms signatures: 34.058 ms = 2.328 ms transfer + 31.730 ms wait
    sized = [r for r in rows if r["comm"]["sized"]]
    assert len(sized) == 15
    t = sum(r["comm"]["transfer_us"] * r["count"] for r in sized)
    w = sum(r["comm"]["wait_us"] * r["count"] for r in sized)
    assert t + w == pytest.approx(sum(r["device_time_us"] for r in sized)) == pytest.approx(34058.0)
    assert t == pytest.approx(2328.36, abs=0.01)
    # the ledger reads the same split: its transfer is the sized rows' transfer, each kernel once
    assert a["ledger"]["communication"]["transfer_us"] == pytest.approx(4041.04, abs=0.01)


TOPO = {"host_gpus": 8, "world_size": 16, "rank": 0, "groups": []}


def test_where_a_group_sits():
    assert placement(1, TOPO)[0] == "host"  # a group of one sends nothing
    assert placement(16, TOPO)[0] == "network"  # 16 ranks > 8 GPUs on the host
    assert placement(8, TOPO)[0] == "unknown"  # fits, but which 8 ranks is not recorded
    assert placement(8, {**TOPO, "world_size": 8})[0] == "host"  # the whole world fits in the host
    # recorded groups: ranks fill hosts in order, 8 per host: [0..7] is one host, [0, 8] spans two
    assert placement(8, {**TOPO, "groups": [tuple(range(8)), tuple(range(8, 16))]})[0] == "host"
    assert placement(2, {**TOPO, "groups": [(0, 8), (1, 9)]})[0] == "network"
    # a process that sees one GPU says nothing about its host
    assert placement(4, {**TOPO, "host_gpus": 1})[0] == "unknown"


def _row(algo, n, msg, per_rank, mean, kernels=1.0):
    return {"name": "record_param_comms", "bound": "communication", "mean_time_us": mean, "count": 1,
            "kernel_count": kernels, "kernels": [], "comm": {"algorithm": algo, "group_size": n,
                                                           "group_assumed": False, "msg_bytes": msg,
                                                           "bytes_per_rank": per_rank, "busbw_gbps": None}}


H100 = {"peer_link": "NVLink 4", "peer_link_gbps": 450.0, "host_link": "PCIe 5.0 x16", "host_link_gbps": 63.0}


def test_link_within_a_host_across_hosts_and_over_pcie():
    # all_reduce of 64 MiB over 8 ranks on one host: 2*7/8 * 67,108,864 = 117,440,512 B per rank;
    # at 450 GB/s = 117,440,512 / 450e3 = 260.979 µs; a 400 µs call waits 139.021 µs
    r = _row("all_reduce", 8, 67108864, 117440512, 400.0)
    finish(r, H100, {**TOPO, "world_size": 8})
    assert r["comm"]["transfer_us"] == pytest.approx(117440512 / 450e3) == pytest.approx(260.979, abs=1e-3)
    assert r["comm"]["wait_us"] == pytest.approx(400.0 - 260.979, abs=1e-3) and r["roof_kind"] == "peer_link"
    # a device with no peer link: peer traffic crosses PCIe (63 GB/s): 117,440,512 / 63e3 = 1864.1 µs > 400:
    # faster than the link allows, wait 0, said
    r = _row("all_reduce", 8, 67108864, 117440512, 400.0)
    finish(r, {**H100, "peer_link": None, "peer_link_gbps": None}, {**TOPO, "world_size": 8})
    assert r["comm"]["link"] == "PCIe 5.0 x16" and r["comm"]["wait_us"] == 0.0 and r["comm"]["over_link"]
    # 16 ranks, 8 per host: the network bounds it; not in the device table, so the transfer is unknown
    r = _row("all_to_all", 16, 16 * 2**20, 15 / 16 * 16 * 2**20, 900.0)
    finish(r, H100, TOPO)
    assert r["roof_kind"] == "network" and r["comm"]["transfer_us"] is None and r["comm"]["wait_us"] is None
    assert "--network-gbps" in r["comm"]["link_why"]
    # with --network-gbps 50: the all_to_all sends 8/16 of S = 8 MiB to the other host at 50 GB/s
    # = 8,388,608 / 50e3 = 167.772 µs, and 7/16 of S = 7,340,032 B over NVLink (16.311 µs): 167.772 µs
    r = _row("all_to_all", 16, 16 * 2**20, 15 / 16 * 16 * 2**20, 900.0)
    finish(r, H100, TOPO, network_gbps=50.0)
    assert r["comm"]["transfer_us"] == pytest.approx(8388608 / 50e3) and r["comm"]["link_gbps"] == 50.0
    assert r["comm"]["wait_us"] == pytest.approx(900.0 - 167.77216)


def test_network_gbps_option_for_a_group_spanning_hosts(tmp_path, capsys):
    """16 ranks, a host of 8 T4s (no NVLink: PCIe 3.0 x16, 15.75 GB/s per direction), a recorded group of
    16: the all_to_all spans hosts. S = 1,048,576 fp32 = 4,194,304 B."""
    from traceana.cli import main

    ev = [{**s.op("record_param_comms", 40, 20, ext=2, dims=[[[1048576]], []], types=["TensorList", ""]),
           "args": {"External id": 2, "Input Dims": [[[1048576]], []], "Input type": ["TensorList", ""],
                    "Collective name": "all_to_all", "In msg nelems": 1048576, "Out msg nelems": 1048576,
                    "Group size": 16, "dtype": "Float"}},
          s.launch(42, corr=101, ext=2),
          s.kernel(COMM[0][0], 200, 500, corr=101, ext=2)]
    path = s.write(tmp_path, s.trace(ev, props=tuple({**s.T4, "id": i} for i in range(8)),
                                     distributedInfo={"rank": 0, "world_size": 16, "backend": "nccl"}))
    out = tmp_path / "a.json"
    assert main(["report", path, "-o", str(out), "-q"]) == 0
    c = next(r for r in json.loads(out.read_text())["ops"] if r["name"] == "record_param_comms")["comm"]
    assert c["placement"] == "network" and c["transfer_us"] is None  # no network figure: unknown
    assert main(["report", path, "-o", str(out), "-q", "--force", "--network-gbps", "25"]) == 0
    c = next(r for r in json.loads(out.read_text())["ops"] if r["name"] == "record_param_comms")["comm"]
    # off the host: 8/16 * S = 2,097,152 B at 25 GB/s = 83.886 µs; on it: 7/16 * S = 1,835,008 B over PCIe
    # at 15.75 GB/s = 116.508 µs: the slower side, 116.508 µs, is the transfer; 500 - 116.508 = 383.492 wait
    assert c["transfer_us"] == pytest.approx(1835008 / 15.75e3) == pytest.approx(116.508, abs=1e-3)
    assert c["wait_us"] == pytest.approx(500 - 1835008 / 15.75e3) and c["link_gbps"] == 25.0
    assert main(["report", path, "-o", str(out), "-q", "--force", "--network-gbps", "-1"]) == 2
    assert "--network-gbps must be a positive number" in capsys.readouterr().err
