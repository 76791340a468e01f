"""NCCL's collectives across nodes (gpuplan.hardware.topology), checked against hand-computed
times from NCCL's tuning model (src/graph/tuning.cc, NVIDIA/nccl master 5067397): a ring or tree
collective across nodes moves a node's share of the data through as many NICs as the group has
GPUs in the node (one or more channels a NIC, PXN reaching the NIC over NVLink), so its bus
bandwidth is ``min(NVLink, members per node x NIC rate)``; a group of one GPU per node holds one
NIC; an all-to-all's bytes ride each GPU's own NIC. The protocol is the fastest of LL, LL128 and
Simple, LL's bus bandwidth capped across nodes (``llMaxBws``: 39 GB/s over two nodes, 20.4 over
more)."""

from __future__ import annotations

import pytest

from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import collective_protocol, collective_time, topology_for

H100 = get_gpu("H100-SXM-80GB")
NVLINK = 900e9 / 2  # the catalog's NVLink 4 both-direction total, per direction
GIB = 1 << 30


def _ring(nbytes, n, nodes, bus, base, hop, net, proxy, share, factor):
    """tuning.cc's ring: base + (steps - inter steps) x max(intra hop, net overhead) + inter
    steps x net hop, plus the bytes x nccl-tests' bus factor over the protocol's bus bandwidth."""
    steps = n - 1 if factor == "gather" else 2 * (n - 1)
    inter = (nodes - 1) * (1 if factor == "gather" else 2)
    lat = base + (steps - inter) * max(hop, proxy) + inter * net
    f = (n - 1) / n if factor == "gather" else 2 * (n - 1) / n
    return lat + nbytes * f / (bus * share)


def test_two_nodes_of_eight_all_gather_with_eight_nics_vs_one():
    """1 GiB all-gathered over 2 nodes x 8 H100: with a 400 Gb/s NIC per GPU the ring holds the
    node's 8 NICs (8 x 50 = 400 GB/s, under NVLink's 450); with one 400 Gb/s NIC for the whole
    node (50 Gb/s a GPU) it holds 50 GB/s -- 8x the bandwidth term, the latency the same."""
    eight = topology_for(H100, inter_node="ib-400")
    one = topology_for(H100, inter_node="50Gb/s")
    simple = dict(base=8.4e-6, hop=3.4e-6, net=9.6e-6, proxy=3e-6, share=1.0, factor="gather")
    want8 = _ring(GIB, 16, 2, 400e9, **simple)
    want1 = _ring(GIB, 16, 2, 50e9, **simple)
    assert want8 == pytest.approx(65.6e-6 + GIB * 15 / 16 / 400e9)  # 8.4 + 14 x 3.4 + 9.6 us
    assert collective_time("all-gather", GIB, 16, eight) == pytest.approx(want8, rel=1e-12)
    assert collective_time("all-gather", GIB, 16, one) == pytest.approx(want1, rel=1e-12)
    assert collective_protocol("all-gather", GIB, 16, eight) == "ring/Simple"
    # the bandwidth terms: 8 NICs against 1
    assert (want1 - 65.6e-6) / (want8 - 65.6e-6) == pytest.approx(8.0)
    # the node's link caps it: NICs faster than NVLink leave the ring at NVLink's rate
    fat = topology_for(H100, inter_node="ib-800")
    assert eight.bandwidth(16)[2] == 400e9 and fat.bandwidth(16)[2] == NVLINK
    # reduce-scatter moves the same bytes; all-reduce twice them, and may take the tree
    assert collective_time("reduce-scatter", GIB, 16, eight) == pytest.approx(want8, rel=1e-12)


def test_protocol_switches_with_the_message_size():
    """2 nodes x 8 H100 at 400 Gb/s a GPU, all-gather: 4 KB rides LL (6.6 us + 14 x 1.0 us of
    net overhead + 2.7 us, at min(0.5 x 400, 39) GB/s), 16 MiB LL128 (14 + 14 x 1.9 + 4.0 us at
    0.92 x 400 GB/s) and 1 GiB Simple (its full bandwidth outweighs its latency)."""
    t = topology_for(H100, inter_node="ib-400")
    ll = dict(base=6.6e-6, hop=0.6e-6, net=2.7e-6, proxy=1e-6, share=1.0, factor="gather")
    ll128 = dict(base=14e-6, hop=1.9e-6, net=4.0e-6, proxy=1e-6, share=0.92, factor="gather")
    simple = dict(base=8.4e-6, hop=3.4e-6, net=9.6e-6, proxy=3e-6, share=1.0, factor="gather")
    for size, proto in ((4096, "LL"), (16 << 20, "LL128"), (GIB, "Simple")):
        times = {"LL": _ring(size, 16, 2, 39e9, **ll),  # 0.5 x 400 GB/s capped at llMaxBw
                 "LL128": _ring(size, 16, 2, 400e9, **ll128),
                 "Simple": _ring(size, 16, 2, 400e9, **simple)}
        assert min(times, key=times.get) == proto
        assert collective_protocol("all-gather", size, 16, t) == f"ring/{proto}"
        assert collective_time("all-gather", size, 16, t) == pytest.approx(times[proto],
                                                                           rel=1e-12)
    assert _ring(4096, 16, 2, 39e9, **ll) == pytest.approx(23.3e-6 + 4096 * 15 / 16 / 39e9)


def test_ll_is_capped_harder_beyond_two_nodes():
    """llMaxBws' Intel row: 20.4 GB/s of LL bus bandwidth over more than two nodes."""
    t = topology_for(H100, inter_node="ib-400")
    size = 4096
    ll = dict(base=6.6e-6, hop=0.6e-6, net=2.7e-6, proxy=1e-6, share=1.0, factor="gather")
    assert collective_protocol("all-gather", size, 32, t) == "ring/LL"
    assert collective_time("all-gather", size, 32, t) == pytest.approx(
        _ring(size, 32, 4, 20.4e9, **ll), rel=1e-12)


def test_groups_of_one_gpu_per_node_hold_one_nic():
    """TP 8 inside each node: the data-parallel group's members are 8 ranks apart, one per node,
    and each holds its own NIC (50 GB/s at 400 Gb/s a GPU); where the node's network is 400 Gb/s
    in all (50 Gb/s a GPU) its 8 GPUs share it, 6.25 GB/s each."""
    t = topology_for(H100, inter_node="ib-400")
    assert t.per_node(4, stride=8) == 1 and t.per_node(16, stride=2) == 4
    link, nodes, bw = t.bandwidth(4, stride=8)
    assert (link.kind, nodes, bw) == ("infiniband", 4, 50e9)
    assert t.bandwidth(16, stride=2)[2] == 200e9  # TP 2: 4 GPUs a node in the group, 4 NICs
    shared = topology_for(H100, inter_node="50Gb/s")
    assert shared.bandwidth(4, stride=8)[2] == 6.25e9
    simple = dict(base=8.4e-6, hop=3.4e-6, net=9.6e-6, proxy=3e-6, share=1.0, factor="gather")
    # one GPU a node: every step of the ring crosses the network
    want = _ring(GIB, 4, 4, 50e9, **simple)
    assert want == pytest.approx(8.4e-6 + 3 * 9.6e-6 + GIB * 3 / 4 / 50e9)
    assert collective_time("all-gather", GIB, 4, t, stride=8) == pytest.approx(want, rel=1e-12)


def test_all_to_all_and_send_ride_one_gpus_nic():
    """An all-to-all's and a send's bytes are each GPU's own: one NIC, however many GPUs of the
    node the group holds ("Alltoall cannot aggregate the bandwidth of multiple NICs",
    NVIDIA/nccl-tests #267); inside a node, NVLink."""
    t = topology_for(H100, inter_node="ib-400")
    assert t.bandwidth(16, op="all-to-all")[2] == 50e9
    assert t.bandwidth(16, op="send-recv")[2] == 50e9
    assert t.bandwidth(16, op="all-gather")[2] == 400e9
    assert t.bandwidth(8, op="all-to-all")[2] == NVLINK
    want = 8.4e-6 + 9.6e-6 + GIB / 50e9  # p2p/Simple over the network
    assert collective_time("send-recv", GIB, 2, t, stride=8) == pytest.approx(want, rel=1e-12)


def test_an_all_reduce_across_nodes_takes_the_faster_of_ring_and_tree():
    """1 GiB all-reduce over 2 x 8: the ring's 2(n-1)/n x S at 400 GB/s against the tree's 2 S at
    400 GB/s (Simple): the ring wins for large messages; both on the node's 8 NICs."""
    t = topology_for(H100, inter_node="ib-400")
    simple = dict(base=8.4e-6, hop=3.4e-6, net=9.6e-6, proxy=3e-6, share=1.0, factor="reduce")
    ring = _ring(GIB, 16, 2, 400e9, **simple)
    tree = 2 * (7 * 28e-6 + 1 * 50e-6) + 2 * GIB / 400e9
    assert ring < tree
    assert collective_time("all-reduce", GIB, 16, t) == pytest.approx(ring, rel=1e-12)
    assert collective_protocol("all-reduce", GIB, 16, t) == "ring/Simple"


def test_a_ring_is_as_wide_as_its_emptiest_node():
    """9 GPUs on nodes of 8: the ring crosses into a node where it holds one GPU and so one NIC
    (50 GB/s); 12 GPUs: 4 in the second node, 4 NICs (200 GB/s); 16: 8 NICs."""
    t = topology_for(H100, inter_node="ib-400")
    assert [t.per_node(n) for n in (9, 12, 16)] == [1, 4, 8]
    assert [t.bandwidth(n)[2] for n in (9, 12, 16)] == [50e9, 200e9, 400e9]
    assert t.per_node(6, stride=2) == 2  # TP 2: 4 of the group in the first node, 2 in the next
